#version 450
// Fused scaled dot-product attention (KESTREL_OP_ATTENTION and _BACKWARD, ABI 1.7; dropout 1.8, key
// padding 1.9), the arithmetic of the CPU plugin's (plugins/cpu/ops_attention.cpp) in f32, never a
// (Tq x Tk) matrix in memory. One invocation per row: forward and the query gradient walk a query's
// visible keys, the key and value gradients a key's queries, so every sum has one writer and a fixed
// order (no atomics).
//   forward:   one pass with the running maximum (online softmax): each key rescales the sums so far.
//   backward:  STATS first (per query row: dout . out = sum_j p_j dp_j, and the row's softmax as
//              (top, sum) so that p = exp(s - top) / sum), then PASS 1 dq over query rows, PASS 2 dk
//              and PASS 3 dv over key rows. With m the dropout factor and dp = m dout.v:
//              ds = p (dp - dout.out), dq = scale sum_j ds k_j, dk = scale sum_i ds q_i, dv = sum_i m p dout_i.
//              Without padding (top, sum) is (lse, 1). With it the softmax is recomputed whole: a query
//              that sees only padded keys has a log-sum-exp near -1e29 that has lost its log(sum) to
//              rounding, so exp(s - lse) would not give its weights back (as on the CPU).
// Key padding: score (b, i, j) gains KESTREL_KEY_PADDING_SCORE (-1e29) times mask (b / per_sample, j).
// Dropout (variants with DROPOUT): weight (b, i, j) is kept where RANDOM's Bernoulli draw keeps element
// (b * Tq + i) * Tk + j of a (B,Tq,Tk) tensor (random.comp's mapping), scaled by 1 / keep.
// Bindings (one slot per role across the passes): forward 1 out, 2 q, 3 k, 4 v, 5 lse, 6 mask, 7 counter
// base. STATS 1 dout, 2 q, 3 k, 4 out, 5 lse, 6 mask, 8 stats (3 floats a query row). Passes 1-3: 1 dout,
// 2 q, 3 k, 4 v, 5 stats, 6 mask, 7 counter base, 8 the result.
// Parameters: ints[n - 1] the element offset of binding n's tensor, tensors[n - 1] the rows of bindings
// 1-4 (row_at), ints[15] the binding - 1 whose rows the result's match; ints[8] the rows this pass walks,
// ints[9] Tq, ints[10] Tk, ints[11] D (at most MAX_DEPTH), ints[12] causal (query i sees keys
// [0, i + Tk - Tq]), ints[13] key padding, ints[14] batch entries per mask row; floats[0] scale,
// floats[1] 1 / keep; uints[0..1] seed, [2..3] offset, [4] the keep threshold ceil(keep * 2^24).
// kestrel-variant: attention_f32 -DSTORE_T=float
// kestrel-variant: attention_f16 -DSTORE_T=float16_t
// kestrel-variant: attention_bf16 -DBF16=1
// kestrel-variant: attention_dropout_f32 -DSTORE_T=float -DDROPOUT=1
// kestrel-variant: attention_dropout_f16 -DSTORE_T=float16_t -DDROPOUT=1
// kestrel-variant: attention_dropout_bf16 -DBF16=1 -DDROPOUT=1
// kestrel-variant: attention_stats_f32 -DSTORE_T=float -DSTATS=1
// kestrel-variant: attention_stats_f16 -DSTORE_T=float16_t -DSTATS=1
// kestrel-variant: attention_stats_bf16 -DBF16=1 -DSTATS=1
// kestrel-variant: attention_dq_f32 -DSTORE_T=float -DPASS=1
// kestrel-variant: attention_dq_f16 -DSTORE_T=float16_t -DPASS=1
// kestrel-variant: attention_dq_bf16 -DBF16=1 -DPASS=1
// kestrel-variant: attention_dq_dropout_f32 -DSTORE_T=float -DPASS=1 -DDROPOUT=1
// kestrel-variant: attention_dq_dropout_f16 -DSTORE_T=float16_t -DPASS=1 -DDROPOUT=1
// kestrel-variant: attention_dq_dropout_bf16 -DBF16=1 -DPASS=1 -DDROPOUT=1
// kestrel-variant: attention_dk_f32 -DSTORE_T=float -DPASS=2
// kestrel-variant: attention_dk_f16 -DSTORE_T=float16_t -DPASS=2
// kestrel-variant: attention_dk_bf16 -DBF16=1 -DPASS=2
// kestrel-variant: attention_dk_dropout_f32 -DSTORE_T=float -DPASS=2 -DDROPOUT=1
// kestrel-variant: attention_dk_dropout_f16 -DSTORE_T=float16_t -DPASS=2 -DDROPOUT=1
// kestrel-variant: attention_dk_dropout_bf16 -DBF16=1 -DPASS=2 -DDROPOUT=1
// kestrel-variant: attention_dv_f32 -DSTORE_T=float -DPASS=3
// kestrel-variant: attention_dv_f16 -DSTORE_T=float16_t -DPASS=3
// kestrel-variant: attention_dv_bf16 -DBF16=1 -DPASS=3
// kestrel-variant: attention_dv_dropout_f32 -DSTORE_T=float -DPASS=3 -DDROPOUT=1
// kestrel-variant: attention_dv_dropout_f16 -DSTORE_T=float16_t -DPASS=3 -DDROPOUT=1
// kestrel-variant: attention_dv_dropout_bf16 -DBF16=1 -DPASS=3 -DDROPOUT=1
#define T float
#include "common.glsl"
#include "math.glsl"
#ifdef DROPOUT
#include "philox.glsl"
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;

#define MAX_DEPTH 128            // the host declines deeper heads: a row's vectors live in invocation-local arrays
#define KEY_PADDING_SCORE -1e29  // KESTREL_KEY_PADDING_SCORE (plugin.h)

#if !defined(PASS) && !defined(STATS)
#define FORWARD 1
layout(std430, set = 0, binding = 1) writeonly buffer Out { STORE_T data[]; } out_buf;
layout(std430, set = 0, binding = 2) readonly buffer Q { STORE_T data[]; } q_buf;
layout(std430, set = 0, binding = 3) readonly buffer K { STORE_T data[]; } k_buf;
layout(std430, set = 0, binding = 4) readonly buffer V { STORE_T data[]; } v_buf;
layout(std430, set = 0, binding = 5) writeonly buffer Lse { float data[]; } lse_buf;
#define OUT_AT 1
#define Q_AT 2
#define K_AT 3
#define V_AT 4
#define LSE_AT 5
#elif defined(STATS)
layout(std430, set = 0, binding = 1) readonly buffer Dout { STORE_T data[]; } dout_buf;
layout(std430, set = 0, binding = 2) readonly buffer Q { STORE_T data[]; } q_buf;
layout(std430, set = 0, binding = 3) readonly buffer K { STORE_T data[]; } k_buf;
layout(std430, set = 0, binding = 4) readonly buffer Out { STORE_T data[]; } out_buf;
layout(std430, set = 0, binding = 5) readonly buffer Lse { float data[]; } lse_buf;
layout(std430, set = 0, binding = 8) writeonly buffer Stats { float data[]; } stats_buf;
#define DOUT_AT 1
#define Q_AT 2
#define K_AT 3
#define OUT_AT 4
#define LSE_AT 5
#define STATS_AT 8
#else
layout(std430, set = 0, binding = 1) readonly buffer Dout { STORE_T data[]; } dout_buf;
layout(std430, set = 0, binding = 2) readonly buffer Q { STORE_T data[]; } q_buf;
layout(std430, set = 0, binding = 3) readonly buffer K { STORE_T data[]; } k_buf;
layout(std430, set = 0, binding = 4) readonly buffer V { STORE_T data[]; } v_buf;
layout(std430, set = 0, binding = 5) readonly buffer Stats { float data[]; } stats_buf;
layout(std430, set = 0, binding = 8) writeonly buffer Result { STORE_T data[]; } result_buf;
#define DOUT_AT 1
#define Q_AT 2
#define K_AT 3
#define V_AT 4
#define STATS_AT 5
#define RESULT_AT 8
#endif
layout(std430, set = 0, binding = 6) readonly buffer Mask { STORE_T data[]; } mask_buf;
#ifdef DROPOUT
layout(std430, set = 0, binding = 7) readonly buffer Base { uint data[]; } base_buf;
#endif

// Where row `row` of binding n's (B*T, D) rows starts (its D elements follow one another). The rows
// are described in tensors[n - 1] (the result's by the operand's it shares strides with, ints[15]):
// heads in shape[1], T in shape[2], the sample, head and row strides in strides[0..2]; a contiguous
// (B,T,D) tensor has one head. So ABI 1.13's (N,H,T,D) views are read where they lie.
int description_of(int binding) {
#ifdef RESULT_AT
  return binding == RESULT_AT ? PINT(15) : binding - 1;
#else
  return binding - 1;
#endif
}
uint row_at(int binding, uint row) {
  const int t = description_of(binding);
  const uint steps = max(SHAPE(t, 2), 1u), heads = SHAPE(t, 1);  // no rows (Tq = 0): nothing is read
  const uint b = row / steps, n = b / heads;
  return uint(PINT(binding - 1)) + n * STRIDE(t, 0) + (b - n * heads) * STRIDE(t, 1) + (row - b * steps) * STRIDE(t, 2);
}
// How far apart one batch entry's consecutive rows of binding n are: the loops over a row's keys or
// queries step by it from the entry's first row instead of dividing per row.
uint row_step(int binding) { return STRIDE(description_of(binding), 2); }

// The padding bias of key j of batch entry b (0 without a mask).
float key_bias(uint b, uint j, uint keys) {
  if (PINT(13) == 0) return 0.0;
  return KEY_PADDING_SCORE * LOAD(mask_buf.data[uint(PINT(5)) + (b / uint(PINT(14))) * keys + j]);
}

#ifdef DROPOUT
// The first Philox block: the params' offset plus the counter base on the device (an i64, two words).
uint64_t dropout_start() {
  uint word = 2u * uint(PINT(6));
  uint64_t base = uint64_t(base_buf.data[word]) | (uint64_t(base_buf.data[word + 1u]) << 32);
  return (uint64_t(PUINT(2)) | (uint64_t(PUINT(3)) << 32)) + base;
}
// 1 / keep where element `element` of the (B,Tq,Tk) weights is kept, else 0.
float dropout_factor(uint64_t start, uint64_t element) {
  uint64_t block = start + element / 4ul;
  uint word = philox4x32_10(uvec2(PUINT(0), PUINT(1)), uvec2(uint(block), uint(block >> 32)))[uint(element % 4ul)];
  return (word >> 8) < PUINT(4) ? PFLOAT(1) : 0.0;
}
#define FACTOR(query_row, key) dropout_factor(start, uint64_t(query_row) * keys + (key))
#else
#define FACTOR(query_row, key) 1.0
#endif

void main() {
  const uint rows = uint(PINT(8)), queries = uint(PINT(9)), keys = uint(PINT(10)), depth = uint(PINT(11));
  const bool causal = PINT(12) != 0;
  const float scale = PFLOAT(0);
#ifdef DROPOUT
  const uint64_t start = dropout_start();
#endif
  for (uint row = flat_index(); row < rows; row += flat_stride()) {
#if !defined(PASS) || PASS == 1
    // A query row: b's query i sees keys [0, seen).
    const uint b = row / queries, i = row - b * queries;
    const uint seen = causal ? i + keys - queries + 1u : keys;
    float qi[MAX_DEPTH];
    const uint q_at = row_at(Q_AT, row);
    for (uint d = 0u; d < depth; ++d) qi[d] = LOAD(q_buf.data[q_at + d]);
#endif
#if defined(FORWARD) || defined(STATS)
    // The row's softmax as (top, sum): forward always, STATS where padding needs it recomputed.
    float top = -K_INF, sum = 0.0;
#ifdef FORWARD
    float acc[MAX_DEPTH];
    for (uint d = 0u; d < depth; ++d) acc[d] = 0.0;
    const bool softmax = true;
#else
    const bool softmax = PINT(13) != 0;
#endif
    const uint k_first = row_at(K_AT, b * keys), k_step = row_step(K_AT);
#ifdef FORWARD
    const uint v_first = row_at(V_AT, b * keys), v_step = row_step(V_AT);
#endif
    for (uint j = 0u; softmax && j < seen; ++j) {
      const uint k_at = k_first + j * k_step;
      float s = 0.0;
      for (uint d = 0u; d < depth; ++d) s += qi[d] * LOAD(k_buf.data[k_at + d]);
      s = s * scale + key_bias(b, j, keys);
      const float next = max(top, s);
      const float shrink = exp(top - next);  // 0 at the first key, where top is -inf
      const float w = exp(s - next);
      sum = sum * shrink + w;
#ifdef FORWARD
      const float kept = w * FACTOR(row, j);
      const uint v_at = v_first + j * v_step;
      for (uint d = 0u; d < depth; ++d) acc[d] = acc[d] * shrink + kept * LOAD(v_buf.data[v_at + d]);
#endif
      top = next;
    }
#ifdef FORWARD
    const uint out_at = row_at(OUT_AT, row);
    for (uint d = 0u; d < depth; ++d) out_buf.data[out_at + d] = STORE(acc[d] / sum);
    lse_buf.data[uint(PINT(LSE_AT - 1)) + row] = top + log(sum);
#else
    if (!softmax) {
      top = lse_buf.data[uint(PINT(LSE_AT - 1)) + row];
      sum = 1.0;
    }
    float delta = 0.0;  // dout . out = sum_j p_j dp_j
    const uint dout_at = row_at(DOUT_AT, row), out_at = row_at(OUT_AT, row);
    for (uint d = 0u; d < depth; ++d) delta += LOAD(dout_buf.data[dout_at + d]) * LOAD(out_buf.data[out_at + d]);
    const uint stats = uint(PINT(STATS_AT - 1)) + 3u * row;
    stats_buf.data[stats] = delta;
    stats_buf.data[stats + 1u] = top;
    stats_buf.data[stats + 2u] = sum;
#endif
#elif PASS == 1
    float dout_i[MAX_DEPTH], acc[MAX_DEPTH];
    const uint dout_at = row_at(DOUT_AT, row);
    for (uint d = 0u; d < depth; ++d) {
      dout_i[d] = LOAD(dout_buf.data[dout_at + d]);
      acc[d] = 0.0;
    }
    const uint stats = uint(PINT(STATS_AT - 1)) + 3u * row;
    const float delta = stats_buf.data[stats], top = stats_buf.data[stats + 1u], sum = stats_buf.data[stats + 2u];
    const uint k_first = row_at(K_AT, b * keys), k_step = row_step(K_AT);
    const uint v_first = row_at(V_AT, b * keys), v_step = row_step(V_AT);
    for (uint j = 0u; j < seen; ++j) {
      const uint k_at = k_first + j * k_step, v_at = v_first + j * v_step;
      float s = 0.0, dp = 0.0;
      for (uint d = 0u; d < depth; ++d) {
        s += qi[d] * LOAD(k_buf.data[k_at + d]);
        dp += dout_i[d] * LOAD(v_buf.data[v_at + d]);
      }
      const float p = exp(s * scale + key_bias(b, j, keys) - top) / sum;
      const float ds = p * (dp * FACTOR(row, j) - delta);
      for (uint d = 0u; d < depth; ++d) acc[d] += ds * LOAD(k_buf.data[k_at + d]);
    }
    const uint result_at = row_at(RESULT_AT, row);
    for (uint d = 0u; d < depth; ++d) result_buf.data[result_at + d] = STORE(scale * acc[d]);
#else
    // A key row: b's key j is seen by queries [first, Tq).
    const uint b = row / keys, j = row - b * keys;
    const uint first = causal && j + queries > keys ? j + queries - keys : 0u;
    const float bias = key_bias(b, j, keys);
    float kj[MAX_DEPTH], vj[MAX_DEPTH], acc[MAX_DEPTH];
    const uint k_at = row_at(K_AT, row);
#if PASS == 2
    const uint v_at = row_at(V_AT, row);
#endif
    for (uint d = 0u; d < depth; ++d) {
      kj[d] = LOAD(k_buf.data[k_at + d]);
#if PASS == 2
      vj[d] = LOAD(v_buf.data[v_at + d]);
#endif
      acc[d] = 0.0;
    }
    const uint q_first = row_at(Q_AT, b * queries), q_step = row_step(Q_AT);
    const uint dout_first = row_at(DOUT_AT, b * queries), dout_step = row_step(DOUT_AT);
    for (uint i = first; i < queries; ++i) {
      const uint query_row = b * queries + i;
      const uint q_at = q_first + i * q_step, dout_at = dout_first + i * dout_step;
      float s = 0.0;
      for (uint d = 0u; d < depth; ++d) s += LOAD(q_buf.data[q_at + d]) * kj[d];
      const uint stats = uint(PINT(STATS_AT - 1)) + 3u * query_row;
      const float p = exp(s * scale + bias - stats_buf.data[stats + 1u]) / stats_buf.data[stats + 2u];
#if PASS == 2
      float dp = 0.0;
      for (uint d = 0u; d < depth; ++d) dp += LOAD(dout_buf.data[dout_at + d]) * vj[d];
      const float ds = p * (dp * FACTOR(query_row, j) - stats_buf.data[stats]);
      for (uint d = 0u; d < depth; ++d) acc[d] += ds * LOAD(q_buf.data[q_at + d]);
#else
      const float w = p * FACTOR(query_row, j);
      for (uint d = 0u; d < depth; ++d) acc[d] += w * LOAD(dout_buf.data[dout_at + d]);
#endif
    }
    const uint result_at = row_at(RESULT_AT, row);
#if PASS == 2
    for (uint d = 0u; d < depth; ++d) result_buf.data[result_at + d] = STORE(scale * acc[d]);
#else
    for (uint d = 0u; d < depth; ++d) result_buf.data[result_at + d] = STORE(acc[d]);
#endif
#endif
  }
}
