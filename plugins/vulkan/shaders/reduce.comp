#version 450
// One workgroup per output element: its invocations each fold a strided share of the reduced elements,
// then combine through shared memory. (Lavapipe ends an invocation's loops after 65535 iterations in
// all, so one invocation must never walk a whole long axis; a tree is also what a GPU wants.)
// The host splits the input's axes into kept ones and reduced ones, described as three views (see
// ops_reduce.cpp):
//   tensors[0]  input over the kept axes    tensors[1]  output over the kept axes
//   tensors[2]  input over the reduced axes, offset 0 (added to the kept offset)
// ints[0] = kestrel_reduce_fn (MAX_ABS, 5, and SUM_SQUARES, 6, for floats only; the partials of a
// sum of squares are summed, fn 0). The argmax variants write i64 positions along the reduced axis: the
// first NaN wins, else the largest value at its smallest position.
// T is the type values are compared in, STORE_T the stored one: f16 is loaded into floats, summed in
// an f32 accumulator and rounded once when stored.
// Long float reductions run in two passes (ops_reduce.cpp), so a full reduction of millions of
// elements (loss scaling's overflow check) fills the device instead of one workgroup, and no invocation
// walks more than 256 elements (lavapipe's loop budget). SPLIT: workgroup g folds split s = g % ints[2]
// of output o = g / ints[2], ints[1] reduced elements long, into partials[s * outputs + o] (f32; sums not
// yet divided). PARTIALS: the partials folded into the output, tensors[0] and [2] describing them as
// (outputs) and (splits); a mean divides by ints[3], the reduced count of the original input.
// kestrel-variant: reduce_f32 -DT=float -DACC_T=float -DIS_FLOAT=1
// kestrel-variant: reduce_f16 -DT=float -DSTORE_T=float16_t -DACC_T=float -DIS_FLOAT=1
// kestrel-variant: reduce_bf16 -DT=float -DBF16=1 -DACC_T=float -DIS_FLOAT=1
// kestrel-variant: reduce_i32 -DT=int -DACC_T=int64_t
// kestrel-variant: reduce_i64 -DT=int64_t -DACC_T=int64_t
// kestrel-variant: argmax_f32 -DT=float -DIS_FLOAT=1 -DARGMAX=1
// kestrel-variant: argmax_f16 -DT=float -DSTORE_T=float16_t -DIS_FLOAT=1 -DARGMAX=1
// kestrel-variant: argmax_bf16 -DT=float -DBF16=1 -DIS_FLOAT=1 -DARGMAX=1
// kestrel-variant: argmax_i32 -DT=int -DARGMAX=1
// kestrel-variant: argmax_i64 -DT=int64_t -DARGMAX=1
// kestrel-variant: reduce_f32_subgroups -DT=float -DACC_T=float -DIS_FLOAT=1 -DSUBGROUPS=1
// kestrel-variant: reduce_f16_subgroups -DT=float -DSTORE_T=float16_t -DACC_T=float -DIS_FLOAT=1 -DSUBGROUPS=1
// kestrel-variant: reduce_bf16_subgroups -DT=float -DBF16=1 -DACC_T=float -DIS_FLOAT=1 -DSUBGROUPS=1
// kestrel-variant: reduce_split_f32 -DT=float -DACC_T=float -DIS_FLOAT=1 -DSPLIT=1
// kestrel-variant: reduce_split_f16 -DT=float -DSTORE_T=float16_t -DACC_T=float -DIS_FLOAT=1 -DSPLIT=1
// kestrel-variant: reduce_split_bf16 -DT=float -DBF16=1 -DACC_T=float -DIS_FLOAT=1 -DSPLIT=1
// kestrel-variant: reduce_split_f32_subgroups -DT=float -DACC_T=float -DIS_FLOAT=1 -DSPLIT=1 -DSUBGROUPS=1
// kestrel-variant: reduce_split_f16_subgroups -DT=float -DSTORE_T=float16_t -DACC_T=float -DIS_FLOAT=1 -DSPLIT=1 -DSUBGROUPS=1
// kestrel-variant: reduce_split_bf16_subgroups -DT=float -DBF16=1 -DACC_T=float -DIS_FLOAT=1 -DSPLIT=1 -DSUBGROUPS=1
// kestrel-variant: reduce_partials_f32 -DT=float -DACC_T=float -DIS_FLOAT=1 -DPARTIALS=1
// kestrel-variant: reduce_partials_f16 -DT=float -DSTORE_T=float16_t -DACC_T=float -DIS_FLOAT=1 -DPARTIALS=1
// kestrel-variant: reduce_partials_bf16 -DT=float -DBF16=1 -DACC_T=float -DIS_FLOAT=1 -DPARTIALS=1
#include "common.glsl"
#include "math.glsl"
#if defined(IS_FLOAT) && !defined(ARGMAX)
#include "workgroup_fold.glsl"  // float sums, maxima and minima; integers keep the tree below
#endif
#ifndef STORE_T
#define STORE_T T
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
#ifdef PARTIALS
layout(std430, set = 0, binding = 1) readonly buffer In { float data[]; } in_buf;
#define IN_LOAD(x) (x)
#else
layout(std430, set = 0, binding = 1) readonly buffer In { STORE_T data[]; } in_buf;
#define IN_LOAD(x) LOAD(x)
#endif
#ifdef ARGMAX
layout(std430, set = 0, binding = 2) writeonly buffer Out { int64_t data[]; } out_buf;
#elif defined(SPLIT)
layout(std430, set = 0, binding = 2) writeonly buffer Out { float data[]; } out_buf;
#else
layout(std430, set = 0, binding = 2) writeonly buffer Out { STORE_T data[]; } out_buf;
#endif

#ifdef IS_FLOAT
bool is_nan_value(T v) { return isnan(v); }
#else
bool is_nan_value(T v) { return false; }
#endif

const uint kNone = 0xffffffffu;  // an invocation that saw no element

#ifdef ARGMAX
shared T best_value[KESTREL_LOCAL_SIZE];
shared uint best_index[KESTREL_LOCAL_SIZE];

// Keeps in slot `a` the winner of slots a and b.
void combine(uint a, uint b) {
  uint ia = best_index[a], ib = best_index[b];
  if (ib == kNone) return;
  T va = best_value[a], vb = best_value[b];
  bool take_b;
  if (ia == kNone) take_b = true;
  else if (is_nan_value(va) || is_nan_value(vb)) take_b = is_nan_value(vb) && (!is_nan_value(va) || ib < ia);
  else take_b = vb > va || (vb == va && ib < ia);
  if (take_b) {
    best_value[a] = vb;
    best_index[a] = ib;
  }
}
#else
#ifndef IS_FLOAT
shared ACC_T partial[KESTREL_LOCAL_SIZE];
#endif

#ifdef IS_FLOAT
ACC_T magnitude(ACC_T v) { return v < ACC_T(0) ? -v : v; }  // a NaN stays NaN, whatever abs() would do
#endif

ACC_T fold(int fn, ACC_T acc, ACC_T v) {
#ifdef IS_FLOAT
  if (fn == 2) return nan_max(acc, v);
  if (fn == 3) return nan_min(acc, v);
  if (fn == 5) return nan_max(acc, magnitude(v));
  if (fn == 6) return acc + v * v;
#else
  if (fn == 2) return max(acc, v);
  if (fn == 3) return min(acc, v);
#endif
  return acc + v;
}
#endif

void main() {
  // Every invocation of a workgroup has the same output, so the barriers below are in uniform flow.
  uint o = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
#ifdef SPLIT
  const uint group = o, splits = uint(PINT(2));
  o = group / splits;
#endif
  if (o >= P.tensors[1].numel) return;
  uint lid = gl_LocalInvocationID.x;
  uint base = element_offset(0, o);
  uint count = P.tensors[2].numel;
#ifdef SPLIT
  const uint begin = (group % splits) * uint(PINT(1)), end = min(count, begin + uint(PINT(1)));
#else
  const uint begin = 0u, end = count;
#endif
#ifdef ARGMAX
  T best = T(0);
  uint where = kNone;
  for (uint r = lid; r < count; r += KESTREL_LOCAL_SIZE) {
    T v = LOAD(in_buf.data[base + element_offset(2, r)]);
    if (where == kNone || v > best || (is_nan_value(v) && !is_nan_value(best))) {
      best = v;
      where = r;
    }
    if (is_nan_value(best)) break;  // later NaNs of this share have larger positions
  }
  best_value[lid] = best;
  best_index[lid] = where;
  barrier();
  for (uint s = KESTREL_LOCAL_SIZE / 2; s > 0; s >>= 1) {
    if (lid < s) combine(lid, lid + s);
    barrier();
  }
  if (lid == 0) out_buf.data[element_offset(1, o)] = int64_t(best_index[0]);
#else
  int fn = PINT(0);
  bool additive = fn == 0 || fn == 1 || fn == 6;
  // max/min start from the first element, which every share may fold again without harm
  ACC_T acc = additive || count == 0 ? ACC_T(0) : ACC_T(IN_LOAD(in_buf.data[base]));
#ifdef IS_FLOAT
  if (fn == 5) acc = magnitude(acc);
#endif
  for (uint r = begin + lid; r < end; r += KESTREL_LOCAL_SIZE)
    acc = fold(fn, acc, ACC_T(IN_LOAD(in_buf.data[base + element_offset(2, r)])));
#ifdef IS_FLOAT
  const ACC_T total = workgroup_fold(additive ? FOLD_SUM : fn == 3 ? FOLD_MIN : FOLD_MAX, acc);
#else
  partial[lid] = acc;
  barrier();
  for (uint s = KESTREL_LOCAL_SIZE / 2; s > 0; s >>= 1) {
    if (lid < s) partial[lid] = fold(fn, partial[lid], partial[lid + s]);
    barrier();
  }
  ACC_T total = partial[0];
#endif
#ifdef SPLIT
  if (lid == 0) out_buf.data[(group % splits) * P.tensors[1].numel + o] = total;
#else
#ifdef PARTIALS
  count = uint(PINT(3));
#endif
  if (lid == 0) {
#ifdef IS_FLOAT
    const ACC_T result = fn == 1 ? (count > 0 ? total / float(count) : K_NAN) : total;
#else
    const ACC_T result = total;
#endif
    out_buf.data[element_offset(1, o)] = STORE(T(result));
  }
#endif
#endif
}
