// The Vulkan plugin's op families. Each has `supports_*` (descriptors only; never throws) and
// `launch_*` (builds dispatches and runs them; called only after supports_* said yes).
#pragma once
#include "kestrel/plugin_boundary.hpp"
#include "vk_common.hpp"

namespace kestrel_vk {

bool supports_fill(const kestrel_op& op, uint32_t dtypes);
void launch_fill(kestrel_stream* stream, const kestrel_op& op);
bool supports_copy(const kestrel_op& op, uint32_t dtypes);
void launch_copy(kestrel_stream* stream, const kestrel_op& op);
bool supports_unary(const kestrel_op& op, uint32_t dtypes);
void launch_unary(kestrel_stream* stream, const kestrel_op& op);
bool supports_binary(const kestrel_op& op, uint32_t dtypes);
void launch_binary(kestrel_stream* stream, const kestrel_op& op);
bool supports_reduce(const kestrel_op& op, uint32_t dtypes);
void launch_reduce(kestrel_stream* stream, const kestrel_op& op);
bool supports_gemm(const kestrel_op& op, uint32_t dtypes);
void launch_gemm(kestrel_stream* stream, const kestrel_op& op);
bool supports_gather(const kestrel_op& op, uint32_t dtypes);
void launch_gather(kestrel_stream* stream, const kestrel_op& op);
bool supports_scatter_add(const kestrel_op& op, uint32_t dtypes);
void launch_scatter_add(kestrel_stream* stream, const kestrel_op& op);
bool supports_random(const kestrel_op& op, uint32_t dtypes);
void launch_random(kestrel_stream* stream, const kestrel_op& op);
bool supports_window(const kestrel_op& op, uint32_t dtypes);  // im2col, col2im, pool2d, pool2d_backward
void launch_window(kestrel_stream* stream, const kestrel_op& op);

bool supports_linear(const kestrel_op& op, uint32_t dtypes);
void launch_linear(kestrel_stream* stream, const kestrel_op& op);
bool supports_softmax(const kestrel_op& op, uint32_t dtypes);
void launch_softmax(kestrel_stream* stream, const kestrel_op& op);
bool supports_softmax_cross_entropy(const kestrel_op& op, uint32_t dtypes);
void launch_softmax_cross_entropy(kestrel_stream* stream, const kestrel_op& op);
bool supports_optimizer(const kestrel_op& op, uint32_t dtypes);  // adam_update, sgd_update
void launch_optimizer(kestrel_stream* stream, const kestrel_op& op);
bool supports_lstm_cell(const kestrel_op& op, uint32_t dtypes);  // lstm_cell, lstm_cell_backward
void launch_lstm_cell(kestrel_stream* stream, const kestrel_op& op);
bool supports_gru_cell(const kestrel_op& op, uint32_t dtypes);  // gru_cell, gru_cell_backward (ABI 1.9)
void launch_gru_cell(kestrel_stream* stream, const kestrel_op& op);
bool supports_attention(const kestrel_op& op, uint32_t dtypes);  // attention, attention_backward (ABI 1.7)
void launch_attention(kestrel_stream* stream, const kestrel_op& op);
bool supports_layer_norm(const kestrel_op& op, uint32_t dtypes);  // layer_norm, layer_norm_backward (ABI 1.7)
void launch_layer_norm(kestrel_stream* stream, const kestrel_op& op);
bool supports_conv(const kestrel_op& op, uint32_t dtypes);  // conv2d and its two gradients (ABI 1.10)
void launch_conv(kestrel_stream* stream, const kestrel_op& op);

// The register blocks of the tiled products (shaders/tiles.glsl): narrow, 4 x 4 sums on 16 x 16
// invocations; wide, 8 x 8 on 8 x 8 (software devices, where they took half the time); large, 8 x 8 on
// 16 x 16 with tiles of 2 kTile, for results that fill them. GPUs keep narrow until a GPU run compares
// them. KESTREL_VULKAN_GEMM_BLOCKS=narrow, wide or large chooses (ops_gemm.cpp).
enum class Blocks { narrow, wide, large };
Blocks gemm_blocks(const kestrel_context* context);
// "_subgroups" where the device's subgroups fold (PhysicalDevice::subgroup_folds): the variant of a
// reduction, softmax or bias gradient that folds through them; else "" (ops_reduce.cpp).
const char* subgroup_variant(const kestrel_context* context);
// The block of the result one workgroup of a tiled product computes (TILE_MN in shaders/tiles.glsl),
// narrow and wide; large blocks compute 2 kTile.
constexpr uint32_t kTile = 64;
// A tiled product's variant and grid: "_coop16xN" appended to d.shader for `tensor_cores` (gemm_coop.comp,
// on devices with PhysicalDevice::coop_n), else "_large" or "_wide" as gemm_blocks says (large only where
// the result has at least 2 kTile rows and columns; the device's default blocks otherwise); one workgroup per tile of the (rows x columns) result, z over the batch; a grid past the
// device's limits fails, naming `what` (ops_gemm.cpp).
void set_tile_grid(const kestrel_context* context, Dispatch& d, uint64_t rows, uint64_t columns, uint64_t batch,
                   const std::string& what, bool tensor_cores = false);

// The shaders' integer test for a Bernoulli draw of probability p on a Philox word w: keep when
// (w >> 8) < the threshold (ops_random.cpp).
uint32_t bernoulli_threshold(double p);

// ---- index checks (ops_index.cpp) ----

// The stream's host-visible flag words (vk_common.hpp), created zeroed on first use.
kestrel_buffer* ensure_flags(kestrel_stream* stream);
// Records a dispatch that flags, in words first_word..first_word+3 of the stream's flags, the first
// value of `index` outside [0, extent) (flag, value low, value high, extent).
void record_index_check(kestrel_stream* stream, const kestrel_tensor& index, int64_t extent, uint32_t first_word);

// ---- shared helpers (vk_ops_common.cpp) ----

// Shared with every backend (kestrel/plugin_shapes.hpp, kestrel/plugin_boundary.hpp).
using kestrel::plugin_sdk::params_of;
using kestrel::plugin_shapes::all_contiguous;
using kestrel::plugin_shapes::arity;
using kestrel::plugin_shapes::dtype_bytes;
using kestrel::plugin_shapes::is_contiguous;
using kestrel::plugin_shapes::numel;
using kestrel::plugin_shapes::same_shape;
// "f32", "f16", "i32", "i64": the suffix of shader variant names.
const char* dtype_suffix(kestrel_dtype d);
// The float dtypes the shaders compute (f16 only as storage: its variants compute in f32).
inline bool float_dtype(kestrel_dtype d) {
  return d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F16 || d == KESTREL_DTYPE_BF16;
}
// Set in the mask the families' supports_* get when the device computes in double (shaderFloat64): not a
// tensor dtype (Vulkan tensors are never f64), the loss-scaled Adam update's bias corrections.
constexpr uint32_t kFloat64Arithmetic = 1u << 31;
// Set beside the dtypes for a software device (lavapipe): it ends an invocation's loops once they have
// run 65535 iterations in all, so shaders whose invocations loop long must decline such shapes there.
constexpr uint32_t kLoopBudget = 1u << 30;
// The longest sum a tiled product (tiles.glsl) walks in one dispatch on such a device: each TILE_K slice of
// K costs an invocation about 33 loop iterations (its loads and its 16 steps), so 1024 slices stay well
// inside the budget. A conv weight gradient summing 50176 elements (batch 64 of 28 x 28) lost its tail
// on lavapipe. GEMM cuts longer sums into dispatches of this length; the fused ops decline them.
constexpr int64_t kBudgetedSum = 16384;
// The second pass of a reduction or product split along its sum: output o of `result` (a view of out's
// buffer, result.numel outputs) = fn over s of f32 partials[s * outputs + o], in slice order; a mean divides
// by `count`, the whole sum's length (ops_reduce.cpp; reduce.comp's PARTIALS variants).
Dispatch fold_slices(kestrel_stream* stream, kestrel_buffer* partials, const TensorDesc& result, int64_t slices,
                     const kestrel_tensor& out, kestrel_reduce_fn fn, int64_t count);
inline bool software_device(const kestrel_context* context) {
  return context->physical->properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
}
inline bool in_mask(uint32_t dtypes, kestrel_dtype d) { return d >= 0 && d < KESTREL_DTYPE_COUNT && (dtypes >> d) & 1u; }

// Whether every extent, stride and reachable element of the op's (valid) descriptors fits the shaders'
// 32-bit index arithmetic.
bool fits_32bit_indexing(const kestrel_op& op);

// Checks that every element a descriptor can reach lies inside one binding of the device.
void check_binding_range(const kestrel_context* context, const kestrel_tensor& t, const char* role);

TensorDesc describe(const kestrel_tensor& t);

}  // namespace kestrel_vk
