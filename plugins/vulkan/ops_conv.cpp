// The fused convolution family (shaders/conv.comp, ABI 1.10) as implicit GEMMs on the shared product
// tiles: forward, the input's gradient and the weight's read the images and gradients in place, so the
// (C*KH*KW, N*OH*OW) column matrix of the composed im2col path is never written; the bias gradient is a
// small reduction of its own. f16 and bf16 where the device stores 16 bits, computed in f32.
#include <algorithm>
#include <memory>

#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

// x (N,C,H,W), the weight (O,C,KH,KW) and y or dy (N,O,OH,OW) of a conv op, by kind (plugin_shapes::conv_fits).
struct ConvTensors {
  const kestrel_tensor *x, *weight, *y;
};
ConvTensors tensors_of(const kestrel_op& op) {
  switch (op.kind) {
    case KESTREL_OP_CONV2D: return {&op.inputs[0], &op.inputs[1], &op.outputs[0]};
    case KESTREL_OP_CONV2D_BACKWARD_DATA: return {&op.outputs[0], &op.inputs[1], &op.inputs[0]};
    default: return {&op.inputs[1], &op.outputs[0], &op.inputs[0]};
  }
}

// The length of the sums each kind's product makes: C*KH*KW forward, O*KH*KW for the data gradient and
// N*OH*OW for the filter's.
int64_t reduced_length(const kestrel_op& op, const kestrel::plugin_shapes::WindowGeometry& g, int64_t out_channels) {
  const int64_t taps = int64_t(g.kh) * g.kw;
  if (op.kind == KESTREL_OP_CONV2D) return g.c * taps;
  if (op.kind == KESTREL_OP_CONV2D_BACKWARD_DATA) return out_channels * taps;
  return g.n * g.oh * g.ow;
}

// Images per slice of the weight gradient's sum over the batch. On a software device, what keeps a slice
// within the loop budget (kBudgetedSum). Elsewhere the batch is sliced only when the weight's tiles are too
// few to fill the device (a first layer's 32 x 9 is one tile): enough slices for about kFillGroups
// workgroups, none shorter than kShortestSlice terms.
int64_t images_per_slice(const kestrel_context* context, const kestrel::plugin_shapes::WindowGeometry& g,
                         const Dispatch& filter) {
  const int64_t spatial = int64_t(g.oh) * g.ow;
  if (software_device(context)) return std::max<int64_t>(1, kBudgetedSum / spatial);
  constexpr int64_t kFillGroups = 256, kShortestSlice = 4096;
  const int64_t tiles = int64_t(filter.groups[0]) * filter.groups[1];
  const int64_t slices = std::clamp<int64_t>(std::min(kFillGroups / tiles, g.n * spatial / kShortestSlice), 1, g.n);
  return (g.n + slices - 1) / slices;
}

}  // namespace

bool supports_conv(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::conv_fits(op) || !all_contiguous(op)) return false;
  const kestrel_dtype dtype = op.outputs[0].dtype;
  if (!float_dtype(dtype) || !in_mask(dtypes, dtype)) return false;
  const ConvTensors t = tensors_of(op);
  const auto g = kestrel::plugin_shapes::conv_geometry(params_of<kestrel_conv_params>(op, "conv2d"), *t.x, *t.weight);
  // A software device's loop budget (kBudgetedSum): the filter gradient is summed a few images per
  // dispatch; a longer sum within one image, or forward's and the data gradient's, is composed (through
  // GEMM's slices).
  const int64_t sum = op.kind == KESTREL_OP_CONV2D_BACKWARD_FILTER ? int64_t(g.oh) * g.ow
                                                                   : reduced_length(op, g, t.weight->shape[0]);
  return (dtypes & kLoopBudget) == 0 || sum <= kBudgetedSum;
}

void launch_conv(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_conv_params>(op, "conv2d");
  const ConvTensors t = tensors_of(op);
  const auto g = kestrel::plugin_shapes::conv_geometry(p, *t.x, *t.weight);
  const int64_t out_channels = t.weight->shape[0], taps = int64_t(g.kh) * g.kw;
  // A dispatch of `shader` over the given tensors (tensor k at binding k + 1), with the geometry.
  auto dispatch = [&](const std::string& shader, std::initializer_list<const kestrel_tensor*> tensors) {
    Dispatch d;
    d.shader = shader + dtype_suffix(op.outputs[0].dtype);
    int k = 0;
    for (const kestrel_tensor* tensor : tensors) {
      if (tensor) {
        d.params.tensors[k].offset = static_cast<uint32_t>(tensor->offset);
        d.buffers[k] = tensor->buffer;
      }
      ++k;
    }
    const int64_t geometry[15] = {g.n, g.c, g.h, g.w, out_channels, g.kh, g.kw, g.oh, g.ow,
                                  g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
    for (int i = 0; i < 15; ++i) d.params.ints[i] = static_cast<int32_t>(geometry[i]);
    d.params.ints[15] = p.activation == KESTREL_ACTIVATION_RELU ? 1 : 0;
    return d;
  };
  auto tiled = [&](Dispatch d, int64_t rows, int64_t columns) {
    set_tile_grid(stream->context, d, uint64_t(rows), uint64_t(columns), 1, "conv2d's product");
    return d;
  };
  const bool relu = p.activation == KESTREL_ACTIVATION_RELU;
  const kestrel_tensor* y_for_mask = relu ? &op.inputs[2] : nullptr;
  switch (op.kind) {
    case KESTREL_OP_CONV2D: {
      const kestrel_tensor* bias = op.num_inputs == 3 ? &op.inputs[2] : nullptr;
      Dispatch d = dispatch("conv_forward_", {t.x, t.weight, t.y, bias});
      d.params.uints[0] = bias ? 1u : 0u;
      return run(stream, {tiled(d, out_channels, g.n * g.oh * g.ow)});
    }
    case KESTREL_OP_CONV2D_BACKWARD_DATA:
      return run(stream, {tiled(dispatch("conv_data_", {t.y, t.weight, t.x, y_for_mask}), g.c, g.n * g.h * g.w)});
    default: {
      std::vector<Dispatch> dispatches{
          tiled(dispatch("conv_filter_", {t.y, t.x, t.weight, y_for_mask}), out_channels, g.c * taps)};
      const int64_t per_slice = images_per_slice(stream->context, g, dispatches[0]);
      const int64_t slices = (g.n + per_slice - 1) / per_slice, weights = out_channels * g.c * taps;
      std::unique_ptr<kestrel_buffer, ReleasedInOrder> partials;
      if (slices > 1) {  // slices side by side into f32 partials, then their sum into dw
        partials.reset(allocate_buffer(stream->context, uint64_t(slices * weights) * sizeof(float)));
        Dispatch& filter = dispatches[0];
        filter.params.uints[1] = 1u;
        filter.params.uints[2] = static_cast<uint32_t>(per_slice);
        filter.buffers[4] = partials.get();
        filter.groups[2] = static_cast<uint32_t>(slices);
        dispatches.push_back(fold_slices(stream, partials.get(), describe(*t.weight), slices, *t.weight,
                                         KESTREL_REDUCE_SUM, g.n * int64_t(g.oh) * g.ow));
      }
      if (op.num_outputs == 2) {  // the bias gradient: a workgroup per channel
        Dispatch bias = dispatch("conv_bias_", {t.y, t.x, &op.outputs[1], y_for_mask});
        bias.shader += subgroup_variant(stream->context);
        bias.groups[0] = static_cast<uint32_t>(out_channels);
        dispatches.push_back(bias);
      }
      return run(stream, dispatches);
    }
  }
}

}  // namespace kestrel_vk
