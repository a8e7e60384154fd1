// Fused layer normalisation (shaders/layer_norm.comp, ABI 1.7): forward in one dispatch, one invocation per
// row; backward in two, dx by rows and the weight and bias gradients by columns. The engine composes what
// this declines: on a software device, rows or columns whose walks (up to five passes over a row, one
// over a column) pass the 65535 loop iterations lavapipe lets an invocation run in all.
#include "vk_ops.hpp"

namespace kestrel_vk {

// LAYER_NORM: in0 x (R,C) [, in1 weight (C) [, in2 bias (C)]] -> out0 y (R,C), out1 mean (R), out2 rstd (R).
// LAYER_NORM_BACKWARD: in0 dy, in1 x, in2 mean, in3 rstd [, in4 weight] [, the gradient dx adds to (ABI 1.16)]
// -> out0 dx [, out1 dweight [, out2 dbias]].
// Since ABI 1.15 y (forward) or dy (backward) may be 16-bit beside an f32 x, where the device stores it.
bool supports_layer_norm(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::layer_norm_fits(op, /*lowered=*/true, /*adds=*/true)) return false;
  const bool backward = op.kind == KESTREL_OP_LAYER_NORM_BACKWARD;
  if (!in_mask(dtypes, (backward ? op.inputs[0] : op.outputs[0]).dtype)) return false;
  const kestrel_tensor& x = op.inputs[backward ? 1 : 0];
  const bool within_budget = (dtypes & kLoopBudget) == 0 ||
                             (5 * x.shape[1] + 5 <= kMaxLoopIterations && x.shape[0] + 1 <= kMaxLoopIterations);
  return float_dtype(x.dtype) && in_mask(dtypes, x.dtype) && x.shape[1] >= 1 && x.shape[1] <= kMaxLoopIterations &&
         x.shape[0] <= kMaxLoopIterations && within_budget;
}

void launch_layer_norm(kestrel_stream* stream, const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_LAYER_NORM_BACKWARD;
  const kestrel_tensor& x = op.inputs[backward ? 1 : 0];
  const int64_t rows = x.shape[0], cols = x.shape[1];
  const kestrel_dtype row_dtype = (backward ? op.inputs[0] : op.outputs[0]).dtype;  // y's or dy's
  // The variant for x's dtype, with 16-bit y or dy rows beside an f32 x (ABI 1.15) a variant of its own.
  const std::string dtypes = row_dtype == x.dtype ? std::string(dtype_suffix(x.dtype))
                                                  : std::string("f32_lowered_") + dtype_suffix(row_dtype);
  // A dispatch of `shader` over `count` rows or columns, the tensors at bindings 1, 2, ... in order (null:
  // a binding left empty), `weighted` and `biased` saying which optional ones are there.
  auto dispatch = [&](const char* shader, int64_t count, std::initializer_list<const kestrel_tensor*> tensors,
                      bool weighted, bool biased) {
    Dispatch d;
    d.shader = std::string(shader) + dtypes;
    int binding = 0;
    for (const kestrel_tensor* t : tensors) {
      if (t) {
        d.params.ints[binding] = static_cast<int32_t>(t->offset);
        d.buffers[binding] = t->buffer;
      }
      ++binding;
    }
    d.params.ints[6] = weighted ? 1 : 0;
    d.params.ints[7] = biased ? 1 : 0;
    d.params.uints[0] = static_cast<uint32_t>(rows);
    d.params.uints[1] = static_cast<uint32_t>(cols);
    d.params.floats[0] = static_cast<float>(params_of<kestrel_layer_norm_params>(op, "layer_norm").eps);
    set_row_grid(stream->context, d, static_cast<uint64_t>(count));  // one row (or column) per invocation
    return d;
  };
  if (!backward) {
    if (rows == 0) return;
    const kestrel_tensor* weight = op.num_inputs > 1 ? &op.inputs[1] : nullptr;
    const kestrel_tensor* bias = op.num_inputs > 2 ? &op.inputs[2] : nullptr;
    run(stream, {dispatch("layer_norm_", rows, {&x, weight, bias, &op.outputs[0], &op.outputs[1], &op.outputs[2]},
                          weight != nullptr, bias != nullptr)});
    return;
  }
  const kestrel_tensor *dy = &op.inputs[0], *mean = &op.inputs[2], *rstd = &op.inputs[3];
  const kestrel_tensor* weight = op.num_outputs > 1 ? &op.inputs[4] : nullptr;  // with dweight
  std::vector<Dispatch> dispatches;
  if (rows > 0) {
    dispatches.push_back(
        dispatch("layer_norm_rows_", rows, {dy, &x, mean, rstd, weight, &op.outputs[0]}, weight != nullptr, false));
    // Binding 7, whose offset cannot sit in ints[6] (the weight's flag): ints[8], and ints[9] says it is there.
    if (const kestrel_tensor* added = kestrel::plugin_shapes::layer_norm_added_gradient(op)) {
      dispatches.back().buffers[6] = added->buffer;
      dispatches.back().params.ints[8] = static_cast<int32_t>(added->offset);
      dispatches.back().params.ints[9] = 1;
    }
  }
  if (op.num_outputs > 1) {  // without rows the gradients are zeros, which the columns' empty sums write
    const kestrel_tensor* dbias = op.num_outputs > 2 ? &op.outputs[2] : nullptr;
    dispatches.push_back(
        dispatch("layer_norm_columns_", cols, {dy, &x, mean, rstd, &op.outputs[1], dbias}, true, dbias != nullptr));
  }
  if (!dispatches.empty()) run(stream, dispatches);
}

}  // namespace kestrel_vk
