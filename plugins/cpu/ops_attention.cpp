// Fused scaled dot-product attention (ABI 1.7; its operands as (N,H,T,D) views since 1.13), forward and
// backward side by side. Each batch entry is one task: its tensors are staged row-major in the arithmetic
// type, and its products are BLAS calls on the task's thread, a block of 32 queries at a time. Only a
// block's (32 x Tk) scores are ever held, never the (Tq x Tk) matrix, and under a causal mask a block
// multiplies only the keys its last query sees (its other rows' weights there are exact zeros, so a NaN
// in a later key's value reaches them, as in the composed path's product). Between the products, each
// row's softmax, dropout and gradient run in loops vectorised for the CPU's widest units
// (KESTREL_VECTOR_CLONES). Before 2026-11-28 the products too were vector loops over one query row at a
// time, at 26-39 GFLOP/s in gpt_char's attention. Backward recomputes the weights from the log-sum-exp
// forward left, and the dropout mask (1.8) from Philox. A key-padding mask (1.9) becomes a per-key bias of the entry's
// scores (-1e29 on padded keys); where every query of an entry sees a real key and padding is an eighth
// of the keys or more, the padded keys are left out altogether (their weights are exactly 0; only the
// sums' rounding moves with the keys' lanes), so a padded batch's attention costs what its real keys do.
// f32 arithmetic for f32 and 16-bit storage, double for f64.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"
#include "cpu_philox.hpp"

namespace kestrel_cpu {

namespace {

using kestrel::plugin_shapes::head_rows;
using kestrel::plugin_shapes::HeadRows;

// The shapes and options every launch reads, from q (B,Tq,D) and k (B,Tk,D) (or their (N,H,T,D) views).
struct Geometry {
  int64_t batch, queries, keys, depth;
  double scale;
  bool causal;
  double keep;            // 1 - dropout: the Bernoulli draw's a (plugin.h 1.8)
  uint64_t seed, offset;  // offset: the params' plus the counter base
  int padding_input;      // the key-padding mask's input (1.9), -1 without one
  int64_t per_sample;     // batch entries per row of the mask (B / N, the heads)
  // Keys [0, visible(i)) are seen by query i.
  int64_t visible(int64_t i) const { return causal ? i + keys - queries + 1 : keys; }
  bool dropout() const { return keep < 1; }
};

Geometry geometry_of(const kestrel_op& op, const HeadRows& q, const HeadRows& k) {
  const auto& p = params_of<kestrel_attention_params>(op, "attention");
  Geometry g{q.batch, q.rows, k.rows, q.depth, p.scale, p.causal != 0, 1.0 - p.dropout, p.seed, p.offset, -1, 1};
  const int counter = p.dropout > 0 ? 1 : 0;
  if (counter) g.offset += uint64_t(*data_of<int64_t>(op.inputs[op.num_inputs - 1]));
  if (p.key_padding) {
    g.padding_input = op.num_inputs - 1 - counter;
    g.per_sample = g.batch / op.inputs[g.padding_input].shape[0];
  }
  return g;
}

// Batch entry b's key bias (Tk) from the (N, Tk) mask: KESTREL_KEY_PADDING_SCORE (plugin.h 1.9) times the
// mask's entry for each key; null without a mask, for the loops to skip.
template <class E>
const Acc<E>* stage_key_bias(const Geometry& g, const typename E::storage* mask, int64_t b, std::vector<Acc<E>>& out) {
  if (!mask) return nullptr;
  out.resize(size_t(g.keys));
  const typename E::storage* row = mask + (b / g.per_sample) * g.keys;
  for (int64_t j = 0; j < g.keys; ++j) out[j] = Acc<E>(E::load(row[j])) * Acc<E>(KESTREL_KEY_PADDING_SCORE);
  return out.data();
}

// An entry's real (unpadded) keys, when the loops may skip the others: each query sees at least one real
// key (a query seeing only padding weighs the padded keys evenly, which needs them all).
struct RealKeys {
  std::vector<int64_t> index;    // the real keys' positions, ascending
  std::vector<int64_t> visible;  // per query, how many of them it sees (a prefix of `index`)
};

// Entry b's real keys from the (N, Tk) mask, or null to keep every key (no mask, no padding, or a query
// seeing padding only).
template <class S, class E>
const RealKeys* select_real_keys(const Geometry& g, const S* mask, int64_t b, RealKeys& out) {
  if (!mask) return nullptr;
  const S* row = mask + (b / g.per_sample) * g.keys;
  out.index.clear();
  for (int64_t j = 0; j < g.keys; ++j)
    if (E::load(row[j]) == 0) out.index.push_back(j);
  // Worth its gathers only where padding is a good part of the keys (an eighth or more).
  if (out.index.size() * 8 > size_t(g.keys) * 7 || out.index.empty() || out.index.front() >= g.visible(0)) return nullptr;
  out.visible.resize(size_t(g.queries));
  size_t seen = 0;
  for (int64_t i = 0; i < g.queries; ++i) {
    while (seen < out.index.size() && out.index[seen] < g.visible(i)) ++seen;
    out.visible[size_t(i)] = int64_t(seen);
  }
  return &out;
}

// The dropout factor of each weight of row `row` (batch entry * Tq + query) for keys [0, seen): 1 / keep
// where RANDOM's Bernoulli draw keeps element row * Tk + j of the (B,Tq,Tk) weights, else 0.
template <class A>
[[gnu::always_inline]] inline void dropout_factors(const Geometry& g, int64_t row, int64_t seen, A* factor) {
  alignas(64) uint32_t words[4 * kPhiloxLanes];
  const A kept = A(1.0 / g.keep);
  const uint32_t limit = kestrel_philox_bernoulli_limit(g.keep);  // kestrel_philox_bernoulli as one compare
  const int64_t first = row * g.keys, last = first + seen;
  for (int64_t e = first; e < last;) {
    const int64_t block = e / 4, end = std::min(last, (block + kPhiloxLanes) * 4);
    philox_lanes(g.seed, g.offset + uint64_t(block), words);
    const uint32_t* word = words + (e - block * 4);  // element e's word, then the next ones'
    A* out = factor + (e - first);
#pragma omp simd
    for (int64_t i = 0; i < end - e; ++i) out[i] = (word[i] >> 8) < limit ? kept : A(0);
    e = end;
  }
}

// The dropout factors of query i's weights over the keys the loops run over (its `seen` real keys when
// `real` is given, drawn at their positions among all keys); every: Tk scratch.
template <class A>
[[gnu::always_inline]] inline void kept_factors(const Geometry& g, int64_t b, int64_t i, int64_t seen,
                                                const RealKeys* real, A* factors, A* every) {
  if (!real) return dropout_factors(g, b * g.queries + i, seen, factors);
  dropout_factors(g, b * g.queries + i, g.visible(i), every);
  for (int64_t j = 0; j < seen; ++j) factors[j] = every[real->index[size_t(j)]];
}

// Batch entry b's (rows, depth) matrix of m (laid out as `at` says) in the arithmetic type, row-major,
// only the rows `real` selects when given.
template <class E>
void stage(const typename E::storage* m, const HeadRows& at, int64_t b, std::vector<Acc<E>>& out,
           const RealKeys* real = nullptr) {
  const int64_t rows = at.rows, depth = at.depth, kept = real ? int64_t(real->index.size()) : rows;
  out.resize(size_t(kept * depth));
  for (int64_t r = 0; r < kept; ++r) {
    const typename E::storage* from = m + at.at(b, real ? real->index[size_t(r)] : r);
    for (int64_t d = 0; d < depth; ++d) out[r * depth + d] = Acc<E>(E::load(from[d]));
  }
}

// Queries whose scores one BLAS product computes at once: the block's (rows, keys) scores stay in a
// thread's scratch, and under a causal mask each block multiplies only the keys its last query sees.
constexpr int64_t kQueryBlock = 32;

// The keys the loops run over for query i: the real ones it sees when `real` is given, else its visible ones.
int64_t seen_by(const Geometry& g, const RealKeys* real, int64_t i) {
  return real ? real->visible[size_t(i)] : std::max<int64_t>(0, g.visible(i));
}

// s[j] = exp(scale * s_j [+ bias_j] - top) for j < seen, top the largest exponent; returns their sum. The
// exps go through the vector math (cpu_vector_math.hpp).
template <class A>
[[gnu::always_inline]] inline A exp_row(A* s, int64_t seen, A scale, const A* bias, A& top) {
  top = -INFINITY;
  if (bias)
    for (int64_t j = 0; j < seen; ++j) top = std::max(top, s[j] = s[j] * scale + bias[j]);
  else
    for (int64_t j = 0; j < seen; ++j) top = std::max(top, s[j] *= scale);
  map_staged<A>(0, seen, [=](int64_t j) { return s[j] - top; }, [=](int64_t j, A e) { s[j] = e; },
                [](A shift) { return std::exp(shift); });
  A sum = 0;
  for (int64_t j = 0; j < seen; ++j) sum += s[j];
  return sum;
}

// Batch entry b's forward on staged arrays: q (Tq, D), k and v (K, D) over K keys (Tk, or the real ones
// `real` selects), bias (Tk) or null -> out (Tq, D), lse (Tq). Per block of queries: scores = q k^T (one
// product), each row's weights in place (exp, dropout, normalised; 0 past the keys the query sees), then
// out = weights v (another). scores: kQueryBlock * K scratch; factors, every: Tk scratch.
template <class A>
[[gnu::always_inline]] inline void entry_forward(const Geometry& g, int64_t b, const RealKeys* real, const A* q,
                                                 const A* k, const A* v, const A* bias, A* out, A* lse, A* scores,
                                                 A* factors, A* every) {
  const int64_t depth = g.depth, keys = real ? int64_t(real->index.size()) : g.keys;
  if (real) bias = nullptr;  // every key left is real
  for (int64_t first = 0; first < g.queries; first += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, g.queries - first), reach = seen_by(g, real, first + rows - 1);
    if (reach > 0 && depth > 0)
      gemm_block<A>({q + first * depth, depth}, {k, depth, true}, rows, reach, depth, A(1), A(0), scores, keys);
    else  // no features: every score 0 (BLAS takes no product of depth 0 into rows of width 0)
      for (int64_t r = 0; r < rows; ++r) std::fill(scores + r * keys, scores + r * keys + reach, A(0));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = first + r, seen = seen_by(g, real, i);
      A* w = scores + r * keys;
      A top;
      const A sum = exp_row(w, seen, A(g.scale), bias, top);
      if (g.dropout()) {
        kept_factors(g, b, i, seen, real, factors, every);
        for (int64_t j = 0; j < seen; ++j) w[j] *= factors[j];
      }
      for (int64_t j = 0; j < seen; ++j) w[j] /= sum;
      std::fill(w + seen, w + reach, A(0));
      lse[i] = top + std::log(sum);
    }
    if (reach > 0 && depth > 0)
      gemm_block<A>({scores, keys}, {v, depth}, rows, depth, reach, A(1), A(0), out + first * depth, depth);
    else
      std::fill(out + first * depth, out + (first + rows) * depth, A(0));
  }
}

// With p = softmax(s) recomputed from the log-sum-exp, m_j each weight's dropout factor (1 without
// dropout) and dp_j = m_j dout . v_j: ds_j = scale * p_j (dp_j - sum_l p_l dp_l); dq = ds k; dk = ds^T q;
// dv = (m p)^T dout. Batch entry b on staged arrays: q, dout (Tq, D); k, v (K, D) over K keys (Tk, or the
// real ones `real` selects); bias (Tk) or null; lse (Tq) -> dq (Tq, D), dk and dv (K, D), summed over the
// entry's queries. Per block of queries, five products: the scores and dout v^T, then dq, dk and dv.
// p, dp: kQueryBlock * K scratch; factors, every: Tk scratch.
template <class A>
[[gnu::always_inline]] inline void entry_backward(const Geometry& g, int64_t b, const RealKeys* real, const A* q,
                                                  const A* dout, const A* k, const A* v, const A* bias, const A* lse,
                                                  A* dq, A* dk, A* dv, A* p, A* dp, A* factors, A* every) {
  const int64_t depth = g.depth, keys = real ? int64_t(real->index.size()) : g.keys;
  if (real) bias = nullptr;  // every key left is real
  std::fill(dk, dk + keys * depth, A(0));
  std::fill(dv, dv + keys * depth, A(0));
  const A scale = A(g.scale);
  for (int64_t first = 0; first < g.queries; first += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, g.queries - first), reach = seen_by(g, real, first + rows - 1);
    const A *q_block = q + first * depth, *dout_block = dout + first * depth;
    if (reach == 0 || depth == 0) {  // no keys seen, or no features: no gradient (but zeros) to write
      std::fill(dq + first * depth, dq + (first + rows) * depth, A(0));
      continue;
    }
    gemm_block<A>({q_block, depth}, {k, depth, true}, rows, reach, depth, A(1), A(0), p, keys);      // q . k_j
    gemm_block<A>({dout_block, depth}, {v, depth, true}, rows, reach, depth, A(1), A(0), dp, keys);  // dout . v_j
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = first + r, seen = seen_by(g, real, i);
      A *pi = p + r * keys, *dpi = dp + r * keys;
      if (bias) {
        // The weights as forward made them. A query that sees only padded keys has a log-sum-exp near
        // -1e29, which has lost its log(sum) to rounding, so exp(score - lse) would not give them back.
        A top;
        const A sum = exp_row(pi, seen, scale, bias, top);
        for (int64_t j = 0; j < seen; ++j) pi[j] /= sum;
      } else {
        const A log_sum = lse[i];
        map_staged<A>(0, seen, [=](int64_t j) { return scale * pi[j] - log_sum; }, [=](int64_t j, A e) { pi[j] = e; },
                      [](A shift) { return std::exp(shift); });
      }
      if (g.dropout()) {
        kept_factors(g, b, i, seen, real, factors, every);
        for (int64_t j = 0; j < seen; ++j) dpi[j] *= factors[j];
      }
      A delta = 0;
      for (int64_t j = 0; j < seen; ++j) delta += pi[j] * dpi[j];
      for (int64_t j = 0; j < seen; ++j) {
        dpi[j] = pi[j] * (dpi[j] - delta) * scale;       // ds_j
        if (g.dropout()) pi[j] *= factors[j];             // the weight dv sees
      }
      std::fill(pi + seen, pi + reach, A(0));
      std::fill(dpi + seen, dpi + reach, A(0));
    }
    gemm_block<A>({dp, keys}, {k, depth}, rows, depth, reach, A(1), A(0), dq + first * depth, depth);
    gemm_block<A>({dp, keys, true}, {q_block, depth}, reach, depth, rows, A(1), A(1), dk, depth);
    gemm_block<A>({p, keys, true}, {dout_block, depth}, reach, depth, rows, A(1), A(1), dv, depth);
  }
}

// Per vector width (KESTREL_VECTOR_CLONES), for the two arithmetic types.
template <class A>
KESTREL_VECTOR_CLONES void entry_forward_cloned(const Geometry& g, int64_t b, const RealKeys* real, const A* q,
                                                const A* k, const A* v, const A* bias, A* out, A* lse, A* scores,
                                                A* factors, A* every) {
  entry_forward(g, b, real, q, k, v, bias, out, lse, scores, factors, every);
}
template <class A>
KESTREL_VECTOR_CLONES void entry_backward_cloned(const Geometry& g, int64_t b, const RealKeys* real, const A* q,
                                                 const A* dout, const A* k, const A* v, const A* bias, const A* lse,
                                                 A* dq, A* dk, A* dv, A* p, A* dp, A* factors, A* every) {
  entry_backward(g, b, real, q, dout, k, v, bias, lse, dq, dk, dv, p, dp, factors, every);
}

// A staged (rows, depth) block back into batch entry b of `to` (laid out as `at` says): row r of `from` to
// row real->index[r] when given, the other rows (the padded keys', whose gradients are 0) zero.
template <class E>
void store_rows(const std::vector<Acc<E>>& from, typename E::storage* to, const HeadRows& at, int64_t b,
                const RealKeys* real = nullptr) {
  using C = typename E::compute;
  const int64_t depth = at.depth;
  if (real) {
    const typename E::storage zero = E::store(C(0));
    for (int64_t r = 0; r < at.rows; ++r) std::fill(to + at.at(b, r), to + at.at(b, r) + depth, zero);
  }
  const int64_t kept = real ? int64_t(real->index.size()) : at.rows;
  for (int64_t r = 0; r < kept; ++r) {
    typename E::storage* row = to + at.at(b, real ? real->index[size_t(r)] : r);
    for (int64_t d = 0; d < depth; ++d) row[d] = E::store(C(from[size_t(r * depth + d)]));
  }
}

void attention_forward(const kestrel_op& op) {
  const HeadRows q_at = head_rows(op.inputs[0]), k_at = head_rows(op.inputs[1]), v_at = head_rows(op.inputs[2]),
                 out_at = head_rows(op.outputs[0]);
  const Geometry g = geometry_of(op, q_at, k_at);
  dispatch_float(op.inputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const S *q = data_of<S>(op.inputs[0]), *k = data_of<S>(op.inputs[1]), *v = data_of<S>(op.inputs[2]);
    S* out = mutable_data_of<S>(op.outputs[0]);  // (B, Tq, D)
    A* lse = mutable_data_of<A>(op.outputs[1]);  // (B, Tq), statistics_dtype
    const S* mask = g.padding_input < 0 ? nullptr : data_of<S>(op.inputs[g.padding_input]);  // (N, Tk)
    const int64_t q_width = g.queries * g.depth, k_width = g.keys * g.depth;
    const auto turn = blas_turn(/*one_thread_each=*/true);  // each entry's products on its own thread
    parallel_for_split("kestrel::attention", g.batch, g.batch * g.queries * k_width, [=, &q_at, &k_at, &v_at, &out_at](int64_t b) {
      thread_local std::vector<A> queries, keys, values, bias, sum, scores, factors, every;
      thread_local RealKeys selection;
      const RealKeys* real = select_real_keys<S, E>(g, mask, b, selection);
      const A* key_bias = real ? nullptr : stage_key_bias<E>(g, mask, b, bias);
      stage<E>(q, q_at, b, queries);
      stage<E>(k, k_at, b, keys, real);
      stage<E>(v, v_at, b, values, real);
      sum.resize(size_t(q_width));
      scores.resize(size_t(kQueryBlock * g.keys));
      factors.resize(size_t(g.keys));
      every.resize(size_t(g.keys));
      entry_forward_cloned<A>(g, b, real, queries.data(), keys.data(), values.data(), key_bias, sum.data(),
                              lse + b * g.queries, scores.data(), factors.data(), every.data());
      store_rows<E>(sum, out, out_at, b);
    });
  });
}

// Each batch entry is one task, so its dk and dv sum over its queries without sharing.
void attention_backward(const kestrel_op& op) {
  const HeadRows dout_at = head_rows(op.inputs[0]), q_at = head_rows(op.inputs[1]), k_at = head_rows(op.inputs[2]),
                 v_at = head_rows(op.inputs[3]), dq_at = head_rows(op.outputs[0]), dk_at = head_rows(op.outputs[1]),
                 dv_at = head_rows(op.outputs[2]);
  const Geometry g = geometry_of(op, q_at, k_at);
  dispatch_float(op.inputs[1].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const S *dout = data_of<S>(op.inputs[0]), *q = data_of<S>(op.inputs[1]), *k = data_of<S>(op.inputs[2]),
            *v = data_of<S>(op.inputs[3]);
    const A* lse = data_of<A>(op.inputs[5]);  // (B, Tq)
    S *dq = mutable_data_of<S>(op.outputs[0]), *dk = mutable_data_of<S>(op.outputs[1]), *dv = mutable_data_of<S>(op.outputs[2]);
    const S* mask = g.padding_input < 0 ? nullptr : data_of<S>(op.inputs[g.padding_input]);  // (N, Tk)
    const int64_t q_width = g.queries * g.depth, k_width = g.keys * g.depth;
    const auto turn = blas_turn(/*one_thread_each=*/true);  // each entry's products on its own thread
    parallel_for_split("kestrel::attention_backward", g.batch, g.batch * g.queries * k_width,
                       [=, &dout_at, &q_at, &k_at, &v_at, &dq_at, &dk_at, &dv_at](int64_t b) {
      thread_local std::vector<A> queries, grads, keys, values, bias, dq_sum, dk_sum, dv_sum, p, dp, factors, every;
      thread_local RealKeys selection;
      const RealKeys* real = select_real_keys<S, E>(g, mask, b, selection);
      const A* key_bias = real ? nullptr : stage_key_bias<E>(g, mask, b, bias);
      stage<E>(q, q_at, b, queries);
      stage<E>(dout, dout_at, b, grads);
      stage<E>(k, k_at, b, keys, real);
      stage<E>(v, v_at, b, values, real);
      dq_sum.resize(size_t(q_width));
      dk_sum.resize(size_t(k_width));
      dv_sum.resize(size_t(k_width));
      p.resize(size_t(kQueryBlock * g.keys));
      dp.resize(size_t(kQueryBlock * g.keys));
      factors.resize(size_t(g.keys));
      every.resize(size_t(g.keys));
      entry_backward_cloned<A>(g, b, real, queries.data(), grads.data(), keys.data(), values.data(), key_bias,
                               lse + b * g.queries, dq_sum.data(), dk_sum.data(), dv_sum.data(), p.data(), dp.data(),
                               factors.data(), every.data());
      store_rows<E>(dq_sum, dq, dq_at, b);
      store_rows<E>(dk_sum, dk, dk_at, b, real);
      store_rows<E>(dv_sum, dv, dv_at, b, real);
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
