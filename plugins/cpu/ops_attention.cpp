// Fused scaled dot-product attention (ABI 1.7), forward and backward side by side. Each batch entry is
// one task: its keys and values are staged in the arithmetic type (also transposed), so every inner loop
// is a contiguous multiply-add over keys or over features that the compiler vectorises, and one query
// row's scores at a time live in a row-sized buffer, never a (Tq x Tk) matrix. Backward recomputes the
// weights from the log-sum-exp forward left. f32 arithmetic for f32 and 16-bit storage, double for f64.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// The shapes and options every launch reads, from q (B,Tq,D) and k (B,Tk,D).
struct Geometry {
  int64_t batch, queries, keys, depth;
  double scale;
  bool causal;
  // Keys [0, visible(i)) are seen by query i.
  int64_t visible(int64_t i) const { return causal ? i + keys - queries + 1 : keys; }
};

Geometry geometry_of(const kestrel_op& op, const kestrel_tensor& q, const kestrel_tensor& k) {
  const auto& p = params_of<kestrel_attention_params>(op, "attention");
  return {q.shape[0], q.shape[1], k.shape[1], q.shape[2], p.scale, p.causal != 0};
}

template <class S>
const S* data_of(const kestrel_tensor& t) { return static_cast<const S*>(t.buffer->data) + t.offset; }
template <class S>
S* mutable_data_of(const kestrel_tensor& t) { return static_cast<S*>(t.buffer->data) + t.offset; }

template <class E>
using Acc = std::conditional_t<std::is_same_v<typename E::storage, double>, double, float>;

// One batch entry's (rows, depth) matrix in the arithmetic type, row-major...
template <class E>
void stage_rows(const typename E::storage* m, int64_t rows, int64_t depth, std::vector<Acc<E>>& out) {
  out.resize(size_t(rows * depth));
  for (int64_t e = 0; e < rows * depth; ++e) out[e] = Acc<E>(E::load(m[e]));
}
// ... or transposed, (depth, rows).
template <class E>
void stage_columns(const typename E::storage* m, int64_t rows, int64_t depth, std::vector<Acc<E>>& out) {
  out.resize(size_t(rows * depth));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < depth; ++d) out[d * rows + r] = Acc<E>(E::load(m[r * depth + d]));
}

// y[0, n) += a * x[0, n)
template <class A>
void multiply_add(A* y, A a, const A* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}

// out[j] = scale * row . m_j for j < seen, m given transposed (depth, keys); returns the log-sum-exp.
template <class A>
A scaled_scores(const A* row, const A* m_t, int64_t depth, int64_t keys, int64_t seen, A scale, A* out) {
  std::fill(out, out + seen, A(0));
  for (int64_t d = 0; d < depth; ++d) multiply_add(out, row[d], m_t + d * keys, seen);
  A top = -INFINITY;
  for (int64_t j = 0; j < seen; ++j) top = std::max(top, out[j] *= scale);
  A sum = 0;
  for (int64_t j = 0; j < seen; ++j) sum += std::exp(out[j] - top);
  return top + std::log(sum);
}

void attention_forward(const kestrel_op& op) {
  const Geometry g = geometry_of(op, op.inputs[0], op.inputs[1]);
  dispatch_float(op.inputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const S *q = data_of<S>(op.inputs[0]), *k = data_of<S>(op.inputs[1]), *v = data_of<S>(op.inputs[2]);
    S* out = mutable_data_of<S>(op.outputs[0]);          // (B, Tq, D)
    A* lse = mutable_data_of<A>(op.outputs[1]);  // (B, Tq), statistics_dtype
    const int64_t width = g.keys * g.depth;
    parallel_for_split("kestrel::attention", g.batch, g.batch * g.queries * width, [=](int64_t b) {
      thread_local std::vector<A> keys_t, values, query, scores, sum;
      stage_columns<E>(k + b * width, g.keys, g.depth, keys_t);
      stage_rows<E>(v + b * width, g.keys, g.depth, values);
      query.resize(size_t(g.depth));
      scores.resize(size_t(g.keys));
      sum.resize(size_t(g.depth));
      for (int64_t i = 0; i < g.queries; ++i) {
        const int64_t r = b * g.queries + i, seen = g.visible(i);
        for (int64_t d = 0; d < g.depth; ++d) query[d] = A(E::load(q[r * g.depth + d]));
        const A log_sum = scaled_scores(query.data(), keys_t.data(), g.depth, g.keys, seen, A(g.scale), scores.data());
        std::fill(sum.begin(), sum.end(), A(0));
        for (int64_t j = 0; j < seen; ++j)
          multiply_add(sum.data(), A(std::exp(scores[j] - log_sum)), values.data() + j * g.depth, g.depth);
        for (int64_t d = 0; d < g.depth; ++d) out[r * g.depth + d] = E::store(typename E::compute(sum[d]));
        lse[r] = log_sum;
      }
    });
  });
}

// With p = softmax(s) recomputed from the log-sum-exp and dp_j = dout . v_j:
// ds_j = scale * p_j (dp_j - sum_l p_l dp_l); dq = sum_j ds_j k_j; dk_j += ds_j q; dv_j += p_j dout.
// Each batch entry is one task, so its dk and dv sum over its queries without sharing.
void attention_backward(const kestrel_op& op) {
  const Geometry g = geometry_of(op, op.inputs[1], op.inputs[2]);
  dispatch_float(op.inputs[1].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const S *dout = data_of<S>(op.inputs[0]), *q = data_of<S>(op.inputs[1]), *k = data_of<S>(op.inputs[2]),
            *v = data_of<S>(op.inputs[3]);
    const A* lse = data_of<A>(op.inputs[5]);  // (B, Tq)
    S *dq = mutable_data_of<S>(op.outputs[0]), *dk = mutable_data_of<S>(op.outputs[1]), *dv = mutable_data_of<S>(op.outputs[2]);
    const int64_t width = g.keys * g.depth;
    parallel_for_split("kestrel::attention_backward", g.batch, g.batch * g.queries * width, [=](int64_t b) {
      thread_local std::vector<A> keys, keys_t, values_t, query, grad_out, p, ds, dq_row, dk_sum, dv_sum;
      stage_rows<E>(k + b * width, g.keys, g.depth, keys);
      stage_columns<E>(k + b * width, g.keys, g.depth, keys_t);
      stage_columns<E>(v + b * width, g.keys, g.depth, values_t);
      query.resize(size_t(g.depth));
      grad_out.resize(size_t(g.depth));
      p.resize(size_t(g.keys));
      ds.resize(size_t(g.keys));
      dq_row.resize(size_t(g.depth));
      dk_sum.assign(size_t(width), A(0));
      dv_sum.assign(size_t(width), A(0));
      for (int64_t i = 0; i < g.queries; ++i) {
        const int64_t r = b * g.queries + i, seen = g.visible(i);
        for (int64_t d = 0; d < g.depth; ++d) {
          query[d] = A(E::load(q[r * g.depth + d]));
          grad_out[d] = A(E::load(dout[r * g.depth + d]));
        }
        std::fill(p.begin(), p.begin() + seen, A(0));
        std::fill(ds.begin(), ds.begin() + seen, A(0));
        for (int64_t d = 0; d < g.depth; ++d) {
          multiply_add(p.data(), query[d], keys_t.data() + d * g.keys, seen);       // q . k_j
          multiply_add(ds.data(), grad_out[d], values_t.data() + d * g.keys, seen);  // dp_j
        }
        A delta = 0;
        for (int64_t j = 0; j < seen; ++j) {
          p[j] = std::exp(A(g.scale) * p[j] - lse[r]);
          delta += p[j] * ds[j];
        }
        std::fill(dq_row.begin(), dq_row.end(), A(0));
        for (int64_t j = 0; j < seen; ++j) {
          const A dsj = p[j] * (ds[j] - delta) * A(g.scale);
          multiply_add(dq_row.data(), dsj, keys.data() + j * g.depth, g.depth);
          multiply_add(dk_sum.data() + j * g.depth, dsj, query.data(), g.depth);
          multiply_add(dv_sum.data() + j * g.depth, p[j], grad_out.data(), g.depth);
        }
        for (int64_t d = 0; d < g.depth; ++d) dq[r * g.depth + d] = E::store(typename E::compute(dq_row[d]));
      }
      for (int64_t e = 0; e < width; ++e) {
        dk[b * width + e] = E::store(typename E::compute(dk_sum[e]));
        dv[b * width + e] = E::store(typename E::compute(dv_sum[e]));
      }
    });
  });
}

}  // namespace

bool supports_attention(const kestrel_op& op) { return kestrel::plugin_shapes::attention_fits(op); }

void launch_attention(const kestrel_op& op) {
  if (op.kind == KESTREL_OP_ATTENTION_BACKWARD)
    attention_backward(op);
  else
    attention_forward(op);
}

}  // namespace kestrel_cpu
