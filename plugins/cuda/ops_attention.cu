// Fused scaled dot-product attention (ABI 1.7; its operands as (N,H,T,D) views since 1.13), forward and
// backward side by side. The products run on
// tensor cores through cuBLAS; one kernel per pass does the softmax (forward) or its gradient (backward)
// over a chunk of batch entries' (Tq x Tk) scores held in stream-ordered scratch. Only the output and
// each query's log-sum-exp outlive a launch: backward recomputes the weights from them, so the engine
// keeps no (T x T) tensor between forward and backward. The softmax kernels also add the key-padding
// bias (1.9) and apply the dropout mask (1.8), RANDOM's Philox draw per weight, in forward and again in
// backward's recomputation.
#include <algorithm>
#include <cmath>
#include <optional>

#include "cuda_kernels.cuh"
#ifdef KESTREL_CUDA_SDPA
#include "cudnn_sdpa.hpp"
#endif
#include "kestrel/philox.h"

namespace kestrel_cuda {

namespace {

constexpr int kRowThreads = 256;
// Scratch for the scores of one pass; a larger batch runs in several passes.
constexpr uint64_t kScratchBudget = uint64_t(1) << 30;

// What the softmax kernels do to each weight besides the softmax, passed by value: the key-padding bias
// and the dropout mask. Rows are numbered within a chunk; first_entry places the chunk in the batch.
struct WeightOptions {
  const void* mask = nullptr;      // (N, Tk) in the op's dtype, 1 at padded keys; null without padding
  int64_t per_sample = 1;          // batch entries per row of the mask (B / N: the heads)
  const long long* base = nullptr; // the counter base (an i64 on the device); null without dropout
  uint64_t seed = 0, offset = 0;   // the params' (the base is added on the device)
  double keep = 1;                 // 1 - dropout: the Bernoulli draw's probability
  int64_t first_entry = 0;
};

using kestrel::plugin_shapes::head_rows;
using kestrel::plugin_shapes::HeadRows;

// The shapes and options of a launch, from q (B,Tq,D) and k (B,Tk,D) (or their (N,H,T,D) views); the mask
// and the counter base follow the op's other inputs (plugin.h), the base last.
struct Geometry {
  int64_t batch, queries, keys, depth;
  int64_t heads;  // batch entries per sample of (N,H,T,D) operands (1 for (B,T,D) ones)
  double scale;
  bool causal;
  WeightOptions weights;
};

Geometry geometry_of(const kestrel_op& op, const kestrel_tensor& q_desc, const kestrel_tensor& k_desc) {
  const auto& p = params_of<kestrel_attention_params>(op, "attention");
  const HeadRows q = head_rows(q_desc), k = head_rows(k_desc);
  Geometry g{q.batch, q.rows, k.rows, q.depth, q.heads, p.scale, p.causal != 0, {}};
  const int counter = p.dropout > 0 ? 1 : 0;
  if (counter) {
    g.weights.base = reinterpret_cast<const long long*>(ref(op.inputs[op.num_inputs - 1]).base);
    g.weights.seed = p.seed;
    g.weights.offset = p.offset;
    g.weights.keep = 1.0 - p.dropout;
  }
  if (p.key_padding) {
    const kestrel_tensor& mask = op.inputs[op.num_inputs - 1 - counter];
    g.weights.mask = ref(mask).base;
    g.weights.per_sample = g.batch / mask.shape[0];
  }
  return g;
}

// Weight j of chunk row `row`'s score bias: KESTREL_KEY_PADDING_SCORE at padded keys, 0 elsewhere.
template <class E>
__device__ __forceinline__ float key_bias(const WeightOptions& o, int64_t row, int64_t queries, int64_t keys,
                                          int64_t j) {
  if (!o.mask) return 0.0f;
  const int64_t entry = o.first_entry + row / queries;
  const auto* mask = static_cast<const typename E::storage*>(o.mask) + (entry / o.per_sample) * keys;
  return float(KESTREL_KEY_PADDING_SCORE) * float(E::load(mask[j]));
}

// The dropout factor of weight j of chunk row `row`: 1 / keep where RANDOM's Bernoulli draw keeps element
// (b * Tq + i) * Tk + j of the (B,Tq,Tk) weights (block offset + element / 4, word element % 4), else 0;
// 1 without dropout. offset is the params' offset plus the counter base.
__device__ __forceinline__ float dropout_factor(const WeightOptions& o, uint64_t offset, int64_t row, int64_t queries,
                                               int64_t keys, int64_t j) {
  if (!o.base) return 1.0f;
  const uint64_t element = uint64_t(o.first_entry * queries + row) * uint64_t(keys) + uint64_t(j);
  const kestrel_philox_block block = kestrel_philox4x32_10(o.seed, offset + element / 4);
  return kestrel_philox_bernoulli(block.v[element % 4], o.keep) ? float(1.0 / o.keep) : 0.0f;
}

// Keys [0, seen) are visible to query row i.
__device__ __forceinline__ int64_t visible_keys(int64_t i, int64_t queries, int64_t keys, bool causal) {
  return causal ? i + keys - queries + 1 : keys;
}


// The largest of a row's scores over keys [0, seen) and the sum of exp(score - largest), both handed to
// every thread of the block; score(j) gives key j's score (with its padding bias).
template <class Score>
__device__ __forceinline__ float2 row_top_and_sum(Score score, int64_t seen) {
  float top = -INFINITY;
  for (int64_t j = threadIdx.x; j < seen; j += blockDim.x) top = fmaxf(top, score(j));
  top = block_all_reduce(top, -INFINITY, MaxOp{});
  float sum = 0;
  for (int64_t j = threadIdx.x; j < seen; j += blockDim.x) sum += expf(score(j) - top);
  return make_float2(top, block_all_reduce(sum, 0.0f, SumOp{}));
}

// One block per query row of the chunk. scores: (rows, Tk) f32, already scaled; weights: (rows, Tk) in
// the op's dtype (the same memory as scores for f32: each element is read before it is overwritten, by
// the same thread), dropped out; lse: (rows), of the scores with their padding bias, before dropout.
template <class E>
__global__ void softmax_rows(const float* scores, typename E::storage* weights, float* lse, int64_t queries,
                             int64_t keys, bool causal, WeightOptions o) {
  const int64_t row = blockIdx.x, seen = visible_keys(row % queries, queries, keys, causal);
  const uint64_t offset = o.base ? o.offset + uint64_t(*o.base) : 0;
  const float* s = scores + row * keys;
  auto score = [&](int64_t j) { return s[j] + key_bias<E>(o, row, queries, keys, j); };  // with its padding bias
  const float2 stats = row_top_and_sum(score, seen);
  const float log_sum = stats.x + logf(stats.y);
  // With a key-padding mask, p divides by the sum, as backward recomputes it: a query that sees only
  // padded keys has a top near -1e29 that swallows log(sum), and exp(s - log_sum) would not sum to 1.
  auto p_at = [&](int64_t j) { return o.mask ? expf(score(j) - stats.x) / stats.y : expf(score(j) - log_sum); };
  typename E::storage* w = weights + row * keys;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const float p = j < seen ? p_at(j) : 0.0f;
    w[j] = E::store(p == 0.0f ? 0.0f : p * dropout_factor(o, offset, row, queries, keys, j));
  }
  if (threadIdx.x == 0) lse[row] = log_sum;
}

// Backward's row pass: with p the forward's weights before dropout, m the dropout factors and dp =
// m dout . v_j (the product is (rows, Tk) f32): weights = m p (for dv) and dscores = scale * p * (dp -
// sum_j p_j dp_j), in the op's dtype (in place for f32). p is exp(s - lse), except with a key-padding
// mask, where the softmax is recomputed whole: a query that sees only padded keys has a log-sum-exp near
// -1e29 that has lost its log(sum) to rounding, so exp(s - lse) would not give its weights back.
template <class E>
__global__ void softmax_grad_rows(const float* scores, const float* dprobs, const float* lse,
                                  typename E::storage* weights, typename E::storage* dscores, int64_t queries,
                                  int64_t keys, bool causal, float scale, WeightOptions o) {
  const int64_t row = blockIdx.x, seen = visible_keys(row % queries, queries, keys, causal);
  const uint64_t offset = o.base ? o.offset + uint64_t(*o.base) : 0;
  const float *s = scores + row * keys, *dp = dprobs + row * keys;
  auto score = [&](int64_t j) { return s[j] + key_bias<E>(o, row, queries, keys, j); };  // with its padding bias
  float top = lse[row], norm = 1.0f;  // p = exp(score - top) / norm
  if (o.mask) {
    const float2 stats = row_top_and_sum(score, seen);
    top = stats.x;
    norm = stats.y;
  }
  auto p_at = [&](int64_t j) { return expf(score(j) - top) / norm; };
  float delta = 0;
  for (int64_t j = threadIdx.x; j < seen; j += blockDim.x)
    delta += p_at(j) * dp[j] * dropout_factor(o, offset, row, queries, keys, j);
  delta = block_all_reduce(delta, 0.0f, SumOp{});
  typename E::storage *w = weights + row * keys, *ds = dscores + row * keys;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const float p = j < seen ? p_at(j) : 0.0f;
    const float m = j < seen ? dropout_factor(o, offset, row, queries, keys, j) : 0.0f;
    const float grad = j < seen ? p * (m * dp[j] - delta) * scale : 0.0f;  // masked: 0 even where dp is not finite
    w[j] = E::store(m * p);
    ds[j] = E::store(grad);
  }
}

// Batch entries per pass (batch > 0): as many as backward's scratch (8 bytes a score for f32, 12 for
// 16-bit) allows within the budget, balanced. Forward passes over the same entries, so backward's
// recomputed scores come from the same products as forward's.
int64_t chunk_size(const Geometry& g, kestrel_dtype dtype) {
  const uint64_t bytes_per_score = dtype == KESTREL_DTYPE_F32 ? 8 : 12;
  const uint64_t per_entry = std::max<uint64_t>(1, uint64_t(g.queries * g.keys) * bytes_per_score);
  const int64_t most = std::max<int64_t>(1, int64_t(kScratchBudget / per_entry));
  const int64_t passes = (g.batch + most - 1) / most;
  const int64_t chunk = (g.batch + passes - 1) / passes;
  return g.heads > 1 ? std::min(chunk, g.heads) : chunk;  // chunks of (N,H,T,D) views stay within a sample
}

char* element(const kestrel_tensor& t, int64_t index) { return ref(t).base + index * dtype_bytes(t.dtype); }

// Row-major (rows, cols) matrices of a chunk, one every `rows * cols` elements, and their transposes.
MatrixView rows_of(char* base, int64_t rows, int64_t cols) { return {base, cols, 1, rows * cols}; }
MatrixView transposed_rows_of(char* base, int64_t rows, int64_t cols) { return {base, 1, cols, rows * cols}; }

// Batch entries from b0 of an operand as batched (rows, D) matrices, or their transposes: one stride
// apart, as they are within one sample of (N,H,T,D) views (chunks never cross samples there).
MatrixView entries_of(const kestrel_tensor& t, int64_t b0) {
  const HeadRows at = head_rows(t);
  return {element(t, at.at(b0, 0)), at.row_stride, 1, at.heads > 1 ? at.head_stride : at.sample_stride};
}
MatrixView transposed_entries_of(const kestrel_tensor& t, int64_t b0) {
  const MatrixView m = entries_of(t, b0);
  return {m.base, m.cs, m.rs, m.bs};
}

// The entries of the chunk from b0: at most `chunk`, and within b0's sample where entries are heads.
int64_t chunk_from(const Geometry& g, int64_t b0, int64_t chunk) {
  const int64_t n = std::min(chunk, g.batch - b0);
  return g.heads > 1 ? std::min(n, g.heads - b0 % g.heads) : n;
}

// Zero every row of an operand's entries (a gradient no query reaches): rank 3 is contiguous (attention_fits).
void zero_rows(kestrel_stream& s, const kestrel_tensor& t) {
  const HeadRows at = head_rows(t);
  const uint64_t bytes = dtype_bytes(t.dtype);
  if (t.rank == 3 || at.contiguous()) {
    check_cuda(cudaMemsetAsync(ref(t).base, 0, uint64_t(numel(t)) * bytes, s.cuda), "attention_backward");
    return;
  }
  const int64_t pitch = at.rows == 1 ? at.depth : at.row_stride;  // one row's stride may be anything
  for (int64_t b = 0; b < at.batch; ++b)
    check_cuda(cudaMemset2DAsync(element(t, at.at(b, 0)), uint64_t(pitch) * bytes, 0, uint64_t(at.depth) * bytes,
                                 uint64_t(at.rows), s.cuda),
               "attention_backward");
}

// in0 q (B,Tq,D), in1 k, in2 v (B,Tk,D) -> out0 (B,Tq,D), out1 lse (B,Tq) f32.
void attention_forward(kestrel_stream& s, const kestrel_op& op) {
  const kestrel_tensor &q = op.inputs[0], &k = op.inputs[1], &v = op.inputs[2], &out = op.outputs[0];
  const Geometry g = geometry_of(op, q, k);
  const kestrel_dtype dtype = q.dtype;
  const bool in_place = dtype == KESTREL_DTYPE_F32;  // the weights overwrite the scores
  const int64_t tq = g.queries, tk = g.keys, d = g.depth;
  if (g.batch == 0 || tq == 0) return;
  const int64_t chunk = chunk_size(g, dtype);
  Scratch scores(s, uint64_t(chunk * tq * tk) * 4);
  std::optional<Scratch> weights_16;
  if (!in_place) weights_16.emplace(s, uint64_t(chunk * tq * tk) * 2);
  char* weights = in_place ? static_cast<char*>(scores.get()) : static_cast<char*>(weights_16->get());
  float* lse = reinterpret_cast<float*>(ref(op.outputs[1]).base);
  for (int64_t b0 = 0, n = 0; b0 < g.batch; b0 += n) {
    n = chunk_from(g, b0, chunk);
    // scores = scale * q @ k^T, kept in f32 (16-bit operands multiply into f32)
    batched_gemm(s, dtype, KESTREL_DTYPE_F32, n, tq, tk, d, entries_of(q, b0), transposed_entries_of(k, b0),
                 rows_of(static_cast<char*>(scores.get()), tq, tk), g.scale, 0.0);
    dispatch_float(dtype, [&](auto elem) {
      using E = decltype(elem);
      WeightOptions options = g.weights;
      options.first_entry = b0;
      softmax_rows<E><<<unsigned(n * tq), kRowThreads, 0, s.cuda>>>(
          static_cast<const float*>(scores.get()), reinterpret_cast<typename E::storage*>(weights), lse + b0 * tq, tq,
          tk, g.causal, options);
    });
    check_launch("attention (softmax)");
    batched_gemm(s, dtype, dtype, n, tq, d, tk, rows_of(weights, tq, tk), entries_of(v, b0), entries_of(out, b0), 1.0,
                 0.0);
  }
}

// in0 dout, in1 q, in2 k, in3 v, in4 out, in5 lse -> out0 dq, out1 dk, out2 dv. The weights come back from
// q, k and the log-sum-exp; out is not needed (its row sums are recomputed as sum_j p_j dp_j).
void attention_backward(kestrel_stream& s, const kestrel_op& op) {
  const kestrel_tensor &dout = op.inputs[0], &q = op.inputs[1], &k = op.inputs[2], &v = op.inputs[3];
  const kestrel_tensor &dq = op.outputs[0], &dk = op.outputs[1], &dv = op.outputs[2];
  const Geometry g = geometry_of(op, q, k);
  const kestrel_dtype dtype = q.dtype;
  const bool in_place = dtype == KESTREL_DTYPE_F32;
  const int64_t tq = g.queries, tk = g.keys, d = g.depth;
  if (g.batch == 0) return;
  if (tq == 0) {  // no query: every key and value gradient is zero
    zero_rows(s, dk);
    zero_rows(s, dv);
    return;
  }
  const int64_t chunk = chunk_size(g, dtype);
  Scratch scores(s, uint64_t(chunk * tq * tk) * 4), dprobs(s, uint64_t(chunk * tq * tk) * 4);
  std::optional<Scratch> weights_16, dscores_16;
  if (!in_place) {
    weights_16.emplace(s, uint64_t(chunk * tq * tk) * 2);
    dscores_16.emplace(s, uint64_t(chunk * tq * tk) * 2);
  }
  char* weights = static_cast<char*>(in_place ? scores.get() : weights_16->get());
  char* dscores = static_cast<char*>(in_place ? dprobs.get() : dscores_16->get());
  const float* lse = reinterpret_cast<const float*>(ref(op.inputs[5]).base);
  for (int64_t b0 = 0, n = 0; b0 < g.batch; b0 += n) {
    n = chunk_from(g, b0, chunk);
    batched_gemm(s, dtype, KESTREL_DTYPE_F32, n, tq, tk, d, entries_of(q, b0), transposed_entries_of(k, b0),
                 rows_of(static_cast<char*>(scores.get()), tq, tk), g.scale, 0.0);
    batched_gemm(s, dtype, KESTREL_DTYPE_F32, n, tq, tk, d, entries_of(dout, b0), transposed_entries_of(v, b0),
                 rows_of(static_cast<char*>(dprobs.get()), tq, tk), 1.0, 0.0);
    dispatch_float(dtype, [&](auto elem) {
      using E = decltype(elem);
      using S = typename E::storage;
      WeightOptions options = g.weights;
      options.first_entry = b0;
      softmax_grad_rows<E><<<unsigned(n * tq), kRowThreads, 0, s.cuda>>>(
          static_cast<const float*>(scores.get()), static_cast<const float*>(dprobs.get()), lse + b0 * tq,
          reinterpret_cast<S*>(weights), reinterpret_cast<S*>(dscores), tq, tk, g.causal, float(g.scale), options);
    });
    check_launch("attention_backward (softmax gradient)");
    // dv = (m p)^T @ dout, dq = ds @ k, dk = ds^T @ q (the scale is inside ds)
    batched_gemm(s, dtype, dtype, n, tk, d, tq, transposed_rows_of(weights, tq, tk), entries_of(dout, b0),
                 entries_of(dv, b0), 1.0, 0.0);
    batched_gemm(s, dtype, dtype, n, tq, d, tk, rows_of(dscores, tq, tk), entries_of(k, b0), entries_of(dq, b0), 1.0,
                 0.0);
    batched_gemm(s, dtype, dtype, n, tk, d, tq, transposed_rows_of(dscores, tq, tk), entries_of(q, b0),
                 entries_of(dk, b0), 1.0, 0.0);
  }
}

}  // namespace

// f32, f16 and bf16 (f64 is composed); the products as cuBLAS takes them (int extents); dropout (1.8)
// and a key-padding mask (1.9) as the softmax kernels apply them.
bool supports_attention(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::attention_fits(op)) return false;
  const kestrel_tensor& q = op.inputs[op.kind == KESTREL_OP_ATTENTION_BACKWARD ? 1 : 0];
  const kestrel_tensor& k = op.inputs[op.kind == KESTREL_OP_ATTENTION_BACKWARD ? 2 : 1];
  const bool dtype_ok = q.dtype == KESTREL_DTYPE_F32 || q.dtype == KESTREL_DTYPE_F16 || q.dtype == KESTREL_DTYPE_BF16;
  const HeadRows qr = head_rows(q), kr = head_rows(k);
  // The views' row strides become cuBLAS's (int) leading dimensions (rank-3 operands' are D, checked below).
  auto rows_fit = [](const kestrel_tensor& t) { return t.rank != 4 || head_rows(t).row_stride <= INT32_MAX; };
  for (int i = 0; i < op.num_inputs; ++i)
    if (!rows_fit(op.inputs[i])) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (!rows_fit(op.outputs[i])) return false;
  return dtype_ok && qr.rows <= INT32_MAX && kr.rows <= INT32_MAX && qr.depth <= INT32_MAX &&
         qr.rows * kr.rows <= INT32_MAX;
}

void launch_attention(kestrel_stream& s, const kestrel_op& op) {
#ifdef KESTREL_CUDA_SDPA
  if (sdpa_try(s, op)) return;  // f16/bf16 through cuDNN's fused attention, where it computes the same
#endif
  if (op.kind == KESTREL_OP_ATTENTION_BACKWARD)
    attention_backward(s, op);
  else
    attention_forward(s, op);
}

}  // namespace kestrel_cuda
