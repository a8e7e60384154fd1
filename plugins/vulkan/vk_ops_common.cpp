// Descriptor checks and conversions shared by the op families.
#include <limits>

#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {
constexpr int64_t kIndexLimit = std::numeric_limits<int32_t>::max();

bool fits_32bit(const kestrel_tensor& t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] > kIndexLimit || t.strides[d] > kIndexLimit) return false;
  return numel(t) <= kIndexLimit && t.offset <= uint64_t(kIndexLimit) &&
         kestrel::plugin_shapes::last_element(t) <= kIndexLimit;
}
}  // namespace

const char* dtype_suffix(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F32: return "f32";
    case KESTREL_DTYPE_F16: return "f16";
    case KESTREL_DTYPE_BF16: return "bf16";
    case KESTREL_DTYPE_I32: return "i32";
    case KESTREL_DTYPE_I64: return "i64";
    default: return "unsupported";
  }
}

bool fits_32bit_indexing(const kestrel_op& op) {
  for (int i = 0; i < op.num_inputs; ++i)
    if (!fits_32bit(op.inputs[i])) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (!fits_32bit(op.outputs[i])) return false;
  return true;
}

void check_binding_range(const kestrel_context* context, const kestrel_tensor& t, const char* role) {
  const int64_t last = kestrel::plugin_shapes::last_element(t);
  if (last < 0) return;
  const uint64_t end = uint64_t(last + 1) * dtype_bytes(t.dtype);
  if (end > context->max_binding_range)
    fail(std::string(role) + " tensor spans " + std::to_string(end) + " bytes, more than this Vulkan device binds (" +
             std::to_string(context->max_binding_range) + "); split the tensor or use another backend",
         KESTREL_STATUS_UNSUPPORTED);
}

TensorDesc describe(const kestrel_tensor& t) {
  TensorDesc desc{};
  desc.offset = static_cast<uint32_t>(t.offset);
  desc.rank = t.rank;
  desc.numel = static_cast<uint32_t>(numel(t));
  desc.contiguous = is_contiguous(t) ? 1u : 0u;
  for (int d = 0; d < t.rank; ++d) {
    desc.shape[d] = static_cast<uint32_t>(t.shape[d]);
    desc.strides[d] = static_cast<uint32_t>(t.strides[d]);
  }
  return desc;
}

}  // namespace kestrel_vk
