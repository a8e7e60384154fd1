// Matrix products, rank 2 or batched rank 3 (shaders/gemm.comp: shared-memory tiles), and the fused
// linear op (the same kernel with a bias and activation epilogue). Transposed and stride-0 (broadcast)
// operands are read through their strides, so nothing is packed on the host. f16 and bf16 operands are
// multiplied and accumulated in f32 and C is rounded once to their dtype, or kept in f32 (ABI 1.6); f16
// products run on cooperative matrices (NVIDIA's tensor cores) where the device has them
// (shaders/gemm_coop.comp).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

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

// Also (ABI 1.6) f16 or bf16 operands into an f32 result: the _f32 variants keep C in f32.
bool supports_gemm(const kestrel_op& op, uint32_t dtypes) {
  const kestrel_dtype dtype = op.inputs[0].dtype;
  return kestrel::plugin_shapes::gemm_fits(op, /*f32_of_16bit=*/true) && float_dtype(dtype) && in_mask(dtypes, dtype);
}

namespace {

// Where neither the environment nor a product's shape says otherwise: wide on software devices, where
// they took half the time, narrow on GPUs until measured there.
Blocks default_blocks(const kestrel_context* context) {
  return context->physical->properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? Blocks::wide : Blocks::narrow;
}

}  // namespace

Blocks gemm_blocks(const kestrel_context* context) {
  static const std::string forced = [] {
    const char* v = std::getenv("KESTREL_VULKAN_GEMM_BLOCKS");
    return std::string(v ? v : "");
  }();
  if (forced == "large") {
    // The large tiles' shared memory (16.6 KiB) passes Vulkan's 16 KiB minimum.
    constexpr uint32_t kLargeTilesBytes = (128 * 17 + 16 * 129) * 4;
    const uint32_t room = context->physical->properties.limits.maxComputeSharedMemorySize;
    if (room < kLargeTilesBytes)
      fail("KESTREL_VULKAN_GEMM_BLOCKS=large: the large tiles need " + std::to_string(kLargeTilesBytes) +
               " bytes of shared memory and this device has " + std::to_string(room) + "; use narrow or wide",
           KESTREL_STATUS_UNSUPPORTED);
    return Blocks::large;
  }
  if (forced == "wide") return Blocks::wide;
  if (forced == "narrow") return Blocks::narrow;
  if (!forced.empty())
    fail("KESTREL_VULKAN_GEMM_BLOCKS is '" + forced + "': use narrow, wide or large (unset: wide on software devices, "
         "narrow elsewhere)", KESTREL_STATUS_INVALID_ARGUMENT);
  return default_blocks(context);
}

void set_tile_grid(const kestrel_context* context, Dispatch& d, uint64_t rows, uint64_t columns, uint64_t batch,
                   const std::string& what, bool tensor_cores) {
  uint64_t tile = kTile;
  Blocks blocks = gemm_blocks(context);
  // Large tiles only where the result fills one both ways: on lavapipe the ConvNet's 32- and 64-channel
  // products took twice as long with half of each tile idle (2026-11-26-vm-vulkan-large-blocks.md).
  if (blocks == Blocks::large && (rows < 2 * kTile || columns < 2 * kTile)) blocks = default_blocks(context);
  if (tensor_cores) {
    d.shader += "_coop16x" + std::to_string(context->physical->coop_n);
  } else if (blocks == Blocks::large) {
    d.shader += "_large";
    tile = 2 * kTile;
  } else if (blocks == Blocks::wide) {
    d.shader += "_wide";
  }
  const uint64_t groups[3] = {(columns + tile - 1) / tile, (rows + tile - 1) / tile, batch};
  const uint32_t* limits = context->physical->properties.limits.maxComputeWorkGroupCount;
  for (int i = 0; i < 3; ++i) {
    if (groups[i] > limits[i])
      fail(what + " exceeds this Vulkan device's grid limits; split the batch", KESTREL_STATUS_UNSUPPORTED);
    d.groups[i] = static_cast<uint32_t>(groups[i]);
  }
}

namespace {

// The tiled GEMM dispatch for c = a @ b (as rank 3), with its grid; false when there is nothing to do.
bool gemm_dispatch(kestrel_stream* stream, const std::string& shader, const kestrel_tensor& a, const kestrel_tensor& b,
                   const kestrel_tensor& c, Dispatch& d) {
  d.shader = shader;
  d.params.tensors[0] = as_batched(a);
  d.params.tensors[1] = as_batched(b);
  d.params.tensors[2] = as_batched(c);
  d.buffers[0] = a.buffer;
  d.buffers[1] = b.buffer;
  d.buffers[2] = c.buffer;
  const uint32_t batch = d.params.tensors[2].shape[0], m = d.params.tensors[2].shape[1], n = d.params.tensors[2].shape[2];
  if (batch == 0 || m == 0 || n == 0) return false;  // K == 0 still runs: C = beta * C (or the bias)
  const bool tensor_cores = a.dtype == KESTREL_DTYPE_F16 && stream->context->physical->coop_n != 0;
  set_tile_grid(stream->context, d, m, n, batch,
                "gemm of " + std::to_string(batch) + " x " + std::to_string(m) + " x " + std::to_string(n), tensor_cores);
  return true;
}

}  // namespace

void launch_gemm(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_gemm_params>(op, "gemm");
  Dispatch d;
  d.params.floats[0] = static_cast<float>(p.alpha);
  d.params.floats[1] = static_cast<float>(p.beta);
  const kestrel_tensor &a = op.inputs[0], &c = op.outputs[0];
  const std::string widened = c.dtype != a.dtype ? "_f32" : "";
  if (!gemm_dispatch(stream, std::string("gemm_") + dtype_suffix(a.dtype) + widened, a, op.inputs[1], c, d)) return;
  const int64_t k = d.params.tensors[0].shape[2];
  if (!software_device(stream->context) || k <= kBudgetedSum) return run(stream, {d});
  // On a software device, slices of K one after another, each adding its part into C (beta 1 after the
  // first; a 16-bit C is rounded between slices).
  std::vector<Dispatch> slices;
  for (int64_t k0 = 0; k0 < k; k0 += kBudgetedSum) {
    Dispatch slice = d;
    TensorDesc &sa = slice.params.tensors[0], &sb = slice.params.tensors[1];
    const auto length = static_cast<uint32_t>(std::min(kBudgetedSum, k - k0));
    sa.offset += static_cast<uint32_t>(k0) * sa.strides[2];
    sb.offset += static_cast<uint32_t>(k0) * sb.strides[1];
    sa.shape[2] = sb.shape[1] = length;
    sa.numel = sa.shape[0] * sa.shape[1] * length;
    sb.numel = sb.shape[0] * length * sb.shape[2];
    sa.contiguous = sb.contiguous = 0;
    if (k0 > 0) slice.params.floats[1] = 1.0f;
    slices.push_back(slice);
  }
  run(stream, slices);
}

// Fused linear: in0 x (M, K) @ in1 w (K, N) [+ in2 bias (N)] -> out0 act(.) [, out1 pre-activation].
// On a software device, sums longer than kBudgetedSum are declined: the engine composes them from GEMM,
// which slices them.
bool supports_linear(const kestrel_op& op, uint32_t dtypes) {
  const kestrel_dtype dtype = op.outputs[0].dtype;
  return kestrel::plugin_shapes::linear_fits(op) && float_dtype(dtype) && in_mask(dtypes, dtype) &&
         ((dtypes & kLoopBudget) == 0 || op.inputs[0].shape[op.inputs[0].rank - 1] <= kBudgetedSum);
}

void launch_linear(kestrel_stream* stream, const kestrel_op& op) {
  const auto activation = params_of<kestrel_linear_params>(op, "linear").activation;
  const bool keep_pre = op.num_outputs == 2;
  const kestrel_tensor& y = op.outputs[0];
  // The GEMM epilogue writes one output (a fifth binding would exceed the 4 storage buffers every
  // device offers): with the pre-activation kept, it writes that, and a second pass applies the
  // activation.
  const kestrel_tensor& gemm_out = keep_pre ? op.outputs[1] : y;
  const std::string dtype = dtype_suffix(y.dtype);
  Dispatch gemm;
  gemm.params.ints[0] = keep_pre ? KESTREL_ACTIVATION_NONE : activation;
  if (op.num_inputs == 3) {
    gemm.params.ints[1] = 1;
    gemm.params.tensors[3] = describe(op.inputs[2]);
    gemm.buffers[3] = op.inputs[2].buffer;
  }
  if (!gemm_dispatch(stream, "linear_" + dtype, op.inputs[0], op.inputs[1], gemm_out, gemm)) return;
  if (!keep_pre) {
    run(stream, {gemm});
    return;
  }
  Dispatch act;
  if (activation == KESTREL_ACTIVATION_NONE) {
    act.shader = "copy_" + dtype + "_" + dtype;
  } else {
    act.shader = "unary_" + dtype;
    act.params.ints[0] = activation == KESTREL_ACTIVATION_RELU ? KESTREL_UNARY_RELU : KESTREL_UNARY_GELU;
  }
  act.params.tensors[0] = describe(gemm_out);
  act.params.tensors[1] = describe(y);
  act.buffers[0] = gemm_out.buffer;
  act.buffers[1] = y.buffer;
  set_flat_grid(stream->context, act, static_cast<uint64_t>(numel(y)));
  run(stream, {gemm, act});
}

}  // namespace kestrel_vk
