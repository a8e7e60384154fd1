// Descriptor checks and conversions shared by the op families.
#include <limits>

#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {
constexpr int64_t kIndexLimit = std::numeric_limits<int32_t>::max();

// Largest element offset a descriptor can reach (or -1 for an empty tensor).
int64_t last_element(const kestrel_tensor& t) {
  if (numel(t) == 0) return -1;
  int64_t last = static_cast<int64_t>(t.offset);
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
  return last;
}

bool tensor_ok(const kestrel_tensor& t) {
  if (t.struct_size < sizeof(kestrel_tensor) || t.dtype < 0 || t.dtype >= KESTREL_DTYPE_COUNT || t.rank < 0 ||
      t.rank > KESTREL_MAX_RANK)
    return false;
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0 || t.shape[d] > kIndexLimit || t.strides[d] > kIndexLimit) return false;
    n *= t.shape[d];
    if (n > kIndexLimit) return false;
  }
  return t.offset <= uint64_t(kIndexLimit) && last_element(t) <= kIndexLimit;
}
}  // namespace

size_t dtype_bytes(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F32: case KESTREL_DTYPE_I32: return 4;
    case KESTREL_DTYPE_F16: case KESTREL_DTYPE_BF16: return 2;
    case KESTREL_DTYPE_U8: return 1;
    default: return 8;
  }
}

const char* dtype_suffix(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F32: return "f32";
    case KESTREL_DTYPE_F16: return "f16";
    case KESTREL_DTYPE_I32: return "i32";
    case KESTREL_DTYPE_I64: return "i64";
    default: return "unsupported";
  }
}

bool valid_tensors(const kestrel_op& op) {
  if (op.num_inputs < 0 || op.num_inputs > KESTREL_MAX_OP_TENSORS || op.num_outputs < 0 ||
      op.num_outputs > KESTREL_MAX_OP_TENSORS)
    return false;
  for (int i = 0; i < op.num_inputs; ++i)
    if (!tensor_ok(op.inputs[i])) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (!tensor_ok(op.outputs[i])) return false;
  return true;
}

bool arity(const kestrel_op& op, int inputs, int outputs) {
  return op.num_inputs == inputs && op.num_outputs == outputs && valid_tensors(op);
}

void check_bounds(const kestrel_context* context, const kestrel_tensor& t, const char* role) {
  if (!t.buffer) fail(std::string(role) + " tensor has no buffer");
  const int64_t last = last_element(t);
  if (last < 0) return;
  const uint64_t end = uint64_t(last + 1) * dtype_bytes(t.dtype);
  if (end > t.buffer->bytes)
    fail(std::string(role) + " tensor reaches element " + std::to_string(last) + ", past the end of its " +
         std::to_string(t.buffer->bytes) + "-byte buffer");
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
