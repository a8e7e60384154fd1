// Counter-based random draws (Philox4x32-10, shaders/random.comp) with plugin.h's element -> counter
// mapping, so a seed gives the same tensor here as on every other backend.
#include <cmath>

#include "vk_ops.hpp"

namespace kestrel_vk {

// Bernoulli keeps when (w >> 8) < p * 2^24, compared in double on the CPU. For the integer k = w >> 8,
// k < t  <=>  k < ceil(t), so the shader's exact integer test gives bit-identical masks.
uint32_t bernoulli_threshold(double p) {
  const double t = p * 16777216.0;
  if (!(t > 0)) return 0;  // also NaN
  if (t >= 16777216.0) return 16777216u;
  return static_cast<uint32_t>(std::ceil(t));
}

bool supports_random(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::random_fits(op) && op.outputs[0].dtype == KESTREL_DTYPE_F32 &&
         in_mask(dtypes, KESTREL_DTYPE_F32);
}

void launch_random(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_random_params>(op, "random");
  const kestrel_tensor& out = op.outputs[0];
  if (numel(out) == 0) return;
  Dispatch d;
  d.shader = "random_f32";
  d.params.tensors[0] = describe(out);
  if (op.num_inputs == 1) {
    d.shader = "random_f32_based";
    // The base's one element: wherever its strides point, it is at the descriptor's offset.
    d.params.tensors[1].offset = static_cast<uint32_t>(op.inputs[0].offset);
    d.buffers[1] = op.inputs[0].buffer;
  }
  d.params.ints[0] = p.distribution;
  d.params.uints[0] = static_cast<uint32_t>(p.seed);
  d.params.uints[1] = static_cast<uint32_t>(p.seed >> 32);
  d.params.uints[2] = static_cast<uint32_t>(p.offset);
  d.params.uints[3] = static_cast<uint32_t>(p.offset >> 32);
  d.params.uints[4] = bernoulli_threshold(p.a);
  d.params.floats[0] = static_cast<float>(p.a);
  d.params.floats[1] = static_cast<float>(p.distribution == KESTREL_DISTRIBUTION_UNIFORM ? p.b - p.a : p.b);
  d.buffers[0] = out.buffer;
  set_flat_grid(stream->context, d, static_cast<uint64_t>(numel(out)));
  run(stream, {d});
}

}  // namespace kestrel_vk
