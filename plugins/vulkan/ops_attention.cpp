// Fused scaled dot-product attention (shaders/attention.comp, ABI 1.7, dropout 1.8): forward in one
// dispatch, backward in three (the query, key and value gradients), one invocation per row each, so no
// (Tq x Tk) weights are ever written. The engine composes what this declines: key padding (1.9), heads
// deeper than the shader's arrays, sequences longer than lavapipe lets a loop run.
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

constexpr int64_t kMaxDepth = 128;   // attention.comp's MAX_DEPTH
constexpr int64_t kMaxLoop = 65535;  // lavapipe ends a loop after this many iterations

}  // namespace

// ATTENTION: in0 q (B,Tq,D), in1 k, in2 v (B,Tk,D) [, counter base] -> out0 (B,Tq,D), out1 lse (B,Tq) f32.
// ATTENTION_BACKWARD: in0 dout, in1 q, in2 k, in3 v, in4 out, in5 lse [, counter base] -> dq, dk, dv.
bool supports_attention(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::attention_fits(op)) return false;
  if (static_cast<const kestrel_attention_params*>(op.params)->key_padding) return false;
  const bool backward = op.kind == KESTREL_OP_ATTENTION_BACKWARD;
  const kestrel_tensor &q = op.inputs[backward ? 1 : 0], &k = op.inputs[backward ? 2 : 1];
  return float_dtype(q.dtype) && in_mask(dtypes, q.dtype) && q.shape[2] >= 1 && q.shape[2] <= kMaxDepth &&
         k.shape[1] >= 1 && q.shape[1] <= kMaxLoop && k.shape[1] <= kMaxLoop;
}

void launch_attention(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_attention_params>(op, "attention");
  const bool backward = op.kind == KESTREL_OP_ATTENTION_BACKWARD, dropout = p.dropout > 0;
  const kestrel_tensor &q = op.inputs[backward ? 1 : 0], &k = op.inputs[backward ? 2 : 1];
  const int64_t batch = q.shape[0], queries = q.shape[1], keys = k.shape[1];
  if (batch == 0) return;
  const int tensors = op.num_inputs - (dropout ? 1 : 0);  // the counter base goes last, after the outputs
  // One dispatch of `pass` over `rows` rows: the op's tensors in binding order, then `result` (backward's
  // one output) and the counter base.
  auto dispatch = [&](const std::string& pass, int64_t rows, const kestrel_tensor* result) {
    Dispatch d;
    d.shader = pass + (dropout ? "dropout_" : "") + dtype_suffix(q.dtype);
    int binding = 0;
    auto bind = [&](const kestrel_tensor& t) {
      d.params.ints[binding] = static_cast<int32_t>(t.offset);
      d.buffers[binding++] = t.buffer;
    };
    for (int i = 0; i < tensors; ++i) bind(op.inputs[i]);
    if (result) bind(*result);
    else for (int i = 0; i < op.num_outputs; ++i) bind(op.outputs[i]);
    if (dropout) bind(op.inputs[op.num_inputs - 1]);
    d.params.ints[8] = static_cast<int32_t>(rows);
    d.params.ints[9] = static_cast<int32_t>(queries);
    d.params.ints[10] = static_cast<int32_t>(keys);
    d.params.ints[11] = static_cast<int32_t>(q.shape[2]);
    d.params.ints[12] = p.causal ? 1 : 0;
    d.params.floats[0] = static_cast<float>(p.scale);
    d.params.floats[1] = static_cast<float>(1.0 / (1.0 - p.dropout));
    d.params.uints[0] = static_cast<uint32_t>(p.seed);
    d.params.uints[1] = static_cast<uint32_t>(p.seed >> 32);
    d.params.uints[2] = static_cast<uint32_t>(p.offset);
    d.params.uints[3] = static_cast<uint32_t>(p.offset >> 32);
    d.params.uints[4] = bernoulli_threshold(1.0 - p.dropout);
    set_flat_grid(stream->context, d, static_cast<uint64_t>(rows));
    return d;
  };
  if (!backward) {
    run(stream, {dispatch("attention_", batch * queries, nullptr)});
    return;
  }
  run(stream, {dispatch("attention_dq_", batch * queries, &op.outputs[0]),
               dispatch("attention_dk_", batch * keys, &op.outputs[1]),
               dispatch("attention_dv_", batch * keys, &op.outputs[2])});
}

}  // namespace kestrel_vk
