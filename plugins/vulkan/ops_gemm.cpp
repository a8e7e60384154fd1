// Matrix products, rank 2 or batched rank 3 (shaders/gemm.comp: shared-memory tiles). Transposed and
// stride-0 (broadcast) operands are read through their strides, so nothing is packed on the host.
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

constexpr uint32_t kTile = 64;  // TILE_MN in gemm.comp: the block of C one workgroup computes

bool gemm_shapes_ok(const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c) {
  if (c.rank != 2 && c.rank != 3) return false;
  if (a.rank != c.rank || b.rank != c.rank) return false;
  const int lead = c.rank - 2;
  if (c.rank == 3 && (a.shape[0] != c.shape[0] || b.shape[0] != c.shape[0])) return false;
  return a.shape[lead] == c.shape[lead] && b.shape[lead + 1] == c.shape[lead + 1] && a.shape[lead + 1] == b.shape[lead];
}

// A rank-2 operand as a batch of one (batch stride 0), so the shader sees rank 3 everywhere.
TensorDesc as_batched(const kestrel_tensor& t) {
  TensorDesc desc = describe(t);
  if (t.rank == 3) return desc;
  desc.rank = 3;
  desc.shape[2] = desc.shape[1];
  desc.shape[1] = desc.shape[0];
  desc.shape[0] = 1;
  desc.strides[2] = desc.strides[1];
  desc.strides[1] = desc.strides[0];
  desc.strides[0] = 0;
  return desc;
}

}  // namespace

bool supports_gemm(const kestrel_op& op, uint32_t dtypes) {
  if (!arity(op, 2, 1) || !op.params) return false;
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &c = op.outputs[0];
  return c.dtype == KESTREL_DTYPE_F32 && in_mask(dtypes, c.dtype) && a.dtype == c.dtype && b.dtype == c.dtype &&
         gemm_shapes_ok(a, b, c);
}

void launch_gemm(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_gemm_params>(op, "gemm");
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &c = op.outputs[0];
  Dispatch d;
  d.shader = "gemm_f32";
  d.params.tensors[0] = as_batched(a);
  d.params.tensors[1] = as_batched(b);
  d.params.tensors[2] = as_batched(c);
  d.params.floats[0] = static_cast<float>(p.alpha);
  d.params.floats[1] = static_cast<float>(p.beta);
  d.buffers[0] = a.buffer;
  d.buffers[1] = b.buffer;
  d.buffers[2] = c.buffer;
  const uint32_t batch = d.params.tensors[2].shape[0], m = d.params.tensors[2].shape[1], n = d.params.tensors[2].shape[2];
  if (batch == 0 || m == 0 || n == 0) return;  // K == 0 still runs: C = beta * C
  const uint32_t* limits = stream->context->physical->properties.limits.maxComputeWorkGroupCount;
  d.groups[0] = (n + kTile - 1) / kTile;
  d.groups[1] = (m + kTile - 1) / kTile;
  d.groups[2] = batch;
  if (d.groups[0] > limits[0] || d.groups[1] > limits[1] || d.groups[2] > limits[2])
    fail("gemm of " + std::to_string(batch) + " x " + std::to_string(m) + " x " + std::to_string(n) +
             " exceeds this Vulkan device's grid limits; split the batch",
         KESTREL_STATUS_UNSUPPORTED);
  run(stream, {d});
}

}  // namespace kestrel_vk
