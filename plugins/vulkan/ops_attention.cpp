// Fused scaled dot-product attention (shaders/attention.comp, ABI 1.7; dropout 1.8, key padding 1.9):
// forward in one dispatch; backward in four, each query row's statistics (into stream-ordered scratch)
// then the query, key and value gradients, one invocation per row each, so no (Tq x Tk) weights are ever
// written. The (B,T,D) operands may be ABI 1.13's (N,H,T,D) views: each one's rows are described to the
// shader (params.tensors) by where they start, so heads are read where a packed projection left them.
// The engine composes what this declines: heads deeper than the shader's arrays, sequences longer than
// lavapipe lets a loop run, gradients laid out unlike their operands.
#include <algorithm>
#include <memory>

#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

constexpr int64_t kMaxDepth = 128;   // attention.comp's MAX_DEPTH

// Binding slots (attention.comp's layouts).
enum Slot { kDout = 0, kQ = 1, kK = 2, kV = 3, kStats = 4, kLse = 4, kMask = 5, kBase = 6, kResult = 7 };

// The rows of a (B,T,D) operand or an (N,H,T,D) view as attention.comp reads them: heads in shape[1],
// rows per batch entry in shape[2], the sample, head and row strides in strides[0..2].
TensorDesc rows_of(const kestrel_tensor& t) {
  const kestrel::plugin_shapes::HeadRows r = kestrel::plugin_shapes::head_rows(t);
  TensorDesc desc{};
  desc.offset = static_cast<uint32_t>(t.offset);
  desc.rank = 4;
  desc.shape[1] = static_cast<uint32_t>(r.heads);
  desc.shape[2] = static_cast<uint32_t>(r.rows);
  desc.shape[3] = static_cast<uint32_t>(r.depth);
  desc.strides[0] = static_cast<uint32_t>(r.sample_stride);
  desc.strides[1] = static_cast<uint32_t>(r.head_stride);
  desc.strides[2] = static_cast<uint32_t>(r.row_stride);
  desc.strides[3] = 1;
  return desc;
}

// Whether a gradient's rows lie as its operand's do (the result binding reads the operand's description):
// the same sample, head and row strides wherever the extent makes them matter (a size-1 axis's stride is
// free: the engine's contiguous tensors and fresh gradients may differ there).
bool same_rows(const kestrel_tensor& a, const kestrel_tensor& b) {
  const kestrel::plugin_shapes::HeadRows ra = kestrel::plugin_shapes::head_rows(a), rb = kestrel::plugin_shapes::head_rows(b);
  return (a.shape[0] <= 1 || ra.sample_stride == rb.sample_stride) && (ra.heads <= 1 || ra.head_stride == rb.head_stride) &&
         (ra.rows <= 1 || ra.row_stride == rb.row_stride);
}

}  // namespace

// ATTENTION: in0 q (B,Tq,D), in1 k, in2 v (B,Tk,D) [, mask (N,Tk)] [, counter base] -> out0 (B,Tq,D),
// out1 lse (B,Tq) f32. ATTENTION_BACKWARD: in0 dout, in1 q, in2 k, in3 v, in4 out, in5 lse [, mask]
// [, counter base] -> dq, dk, dv.
bool supports_attention(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::attention_fits(op)) return false;
  const bool backward = op.kind == KESTREL_OP_ATTENTION_BACKWARD;
  const kestrel_tensor &q = op.inputs[backward ? 1 : 0], &k = op.inputs[backward ? 2 : 1];
  // params.tensors describes four bindings (dout or out, q, k, v); each gradient is written through its
  // operand's description, so it must lie as its operand does.
  if (backward && (!same_rows(op.outputs[0], q) || !same_rows(op.outputs[1], k) || !same_rows(op.outputs[2], op.inputs[3])))
    return false;
  // One invocation walks one row: its keys (or queries) times a few passes over the depth. Where loops
  // share a budget, a bound on that walk (generous: four passes per element) must fit in it.
  const int last = q.rank - 1;
  const int64_t depth = q.shape[last], longest = std::max(q.shape[last - 1], k.shape[last - 1]);
  const bool within_budget = (dtypes & kLoopBudget) == 0 || longest * (4 * depth + 4) + 4 * depth <= kMaxLoopIterations;
  return float_dtype(q.dtype) && in_mask(dtypes, q.dtype) && depth >= 1 && depth <= kMaxDepth &&
         k.shape[last - 1] >= 1 && q.shape[last - 1] <= kMaxLoopIterations && k.shape[last - 1] <= kMaxLoopIterations &&
         within_budget;
}

void launch_attention(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_attention_params>(op, "attention");
  const bool backward = op.kind == KESTREL_OP_ATTENTION_BACKWARD, dropout = p.dropout > 0;
  const kestrel_tensor &q = op.inputs[backward ? 1 : 0], &k = op.inputs[backward ? 2 : 1];
  const kestrel::plugin_shapes::HeadRows q_rows = kestrel::plugin_shapes::head_rows(q);
  const int64_t batch = q_rows.batch, queries = q_rows.rows, keys = kestrel::plugin_shapes::head_rows(k).rows;
  if (batch == 0) return;
  const kestrel_tensor* base = dropout ? &op.inputs[op.num_inputs - 1] : nullptr;
  const kestrel_tensor* mask = p.key_padding ? &op.inputs[op.num_inputs - 1 - (dropout ? 1 : 0)] : nullptr;
  // A dispatch of `shader` over `rows` rows with these tensors in their slots; the mask and the
  // counter base where there are. The (B,T,D) operands' rows are described in params.tensors[slot],
  // the result's by the operand's it lies as (that slot in ints[15]; unused by passes with no result).
  using Bound = std::initializer_list<std::pair<Slot, const kestrel_tensor*>>;
  auto dispatch = [&](const std::string& shader, int64_t rows, Bound tensors, Slot result_like = kDout) {
    Dispatch d;
    d.shader = shader + dtype_suffix(q.dtype);
    auto bind = [&](Slot slot, const kestrel_tensor* t) {
      d.params.ints[slot] = static_cast<int32_t>(t->offset);
      d.buffers[slot] = t->buffer;
      if (slot <= kV) d.params.tensors[slot] = rows_of(*t);
    };
    for (const auto& [slot, t] : tensors) bind(slot, t);
    d.params.ints[15] = result_like;
    if (mask) bind(kMask, mask);
    if (base) bind(kBase, base);
    d.params.ints[8] = static_cast<int32_t>(rows);
    d.params.ints[9] = static_cast<int32_t>(queries);
    d.params.ints[10] = static_cast<int32_t>(keys);
    d.params.ints[11] = static_cast<int32_t>(q_rows.depth);
    d.params.ints[12] = p.causal ? 1 : 0;
    d.params.ints[13] = mask ? 1 : 0;
    d.params.ints[14] = mask ? static_cast<int32_t>(batch / mask->shape[0]) : 1;
    d.params.floats[0] = static_cast<float>(p.scale);
    d.params.floats[1] = static_cast<float>(1.0 / (1.0 - p.dropout));
    d.params.uints[0] = static_cast<uint32_t>(p.seed);
    d.params.uints[1] = static_cast<uint32_t>(p.seed >> 32);
    d.params.uints[2] = static_cast<uint32_t>(p.offset);
    d.params.uints[3] = static_cast<uint32_t>(p.offset >> 32);
    d.params.uints[4] = bernoulli_threshold(1.0 - p.dropout);
    set_row_grid(stream->context, d, static_cast<uint64_t>(rows));
    return d;
  };
  const std::string dropped = dropout ? "dropout_" : "";
  if (!backward) {
    run(stream, {dispatch("attention_" + dropped, batch * queries,
                          {{kQ, &q}, {kK, &k}, {kV, &op.inputs[2]}, {kDout, &op.outputs[0]}, {kLse, &op.outputs[1]}})});
    return;
  }
  // Each query row's dout . out and softmax (top, sum): 3 floats.
  std::unique_ptr<kestrel_buffer, ReleasedInOrder> stats(
      allocate_buffer(stream->context, std::max<uint64_t>(4, uint64_t(batch * queries) * 3 * sizeof(float))));
  kestrel_tensor stats_tensor{};
  stats_tensor.buffer = stats.get();
  const kestrel_tensor &dout = op.inputs[0], &v = op.inputs[3], &out = op.inputs[4], &lse = op.inputs[5];
  // The three gradient passes read the same tensors, each writing its own result.
  auto gradient = [&](const char* pass, int64_t rows, const kestrel_tensor& result, Slot result_like) {
    return dispatch(pass + dropped, rows,
                    {{kDout, &dout}, {kQ, &q}, {kK, &k}, {kV, &v}, {kStats, &stats_tensor}, {kResult, &result}},
                    result_like);
  };
  run(stream, {dispatch("attention_stats_", batch * queries,
                        {{kDout, &dout}, {kQ, &q}, {kK, &k}, {kV, &out}, {kLse, &lse}, {kResult, &stats_tensor}}),
               gradient("attention_dq_", batch * queries, op.outputs[0], kQ),
               gradient("attention_dk_", batch * keys, op.outputs[1], kK),
               gradient("attention_dv_", batch * keys, op.outputs[2], kV)});
}

}  // namespace kestrel_vk
