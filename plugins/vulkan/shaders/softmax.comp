#version 450
// Row-wise softmax, log-softmax and softmax cross-entropy over the last axis of contiguous rows. One
// workgroup per row: every invocation folds a strided share of the row, and the shares meet through
// workgroup_fold.glsl (as in reduce.comp: lavapipe ends an invocation's loops after 65535 iterations in
// all, so one invocation must never walk a whole long row; the host declines rows over 256 * 16000).
// Arithmetic follows the CPU plugin (ops_fused.cpp): max first, then sum(exp(x - max)), then the row.
//   uints[0] = columns, uints[1] = rows; tensors[t].offset locates each tensor.
//   softmax:        tensors[0] in, tensors[1] out; ints[0] != 0 gives log_softmax.
//   cross-entropy:  tensors[0] logits (N, C), [1] labels (N), [2] loss (N), [3] dlogits (N, C) when
//                   ints[0] != 0 (softmax - onehot). A label outside [0, C) gives NaN for its row; the
//                   host's index check (index.comp) reports it. 16-bit logits (STORE_T) have an f32 loss
//                   and no dlogits (plugin ABI 1.12).
//   BACKWARD:       tensors[0] logits, [1] labels, [2] scales (N) f32, [3] dlogits = (softmax - onehot) *
//                   scale in the logits' dtype; uints[2] is the scales' stride (0: one for every row). A
//                   label outside [0, C) subtracts nothing (forward has reported it).
// kestrel-variant: softmax_f32
// kestrel-variant: softmax_cross_entropy_f32_i32 -DCROSS_ENTROPY=1 -DI=int
// kestrel-variant: softmax_cross_entropy_f32_i64 -DCROSS_ENTROPY=1 -DI=int64_t
// kestrel-variant: softmax_f32_subgroups -DSUBGROUPS=1
// kestrel-variant: softmax_cross_entropy_f32_i32_subgroups -DCROSS_ENTROPY=1 -DI=int -DSUBGROUPS=1
// kestrel-variant: softmax_cross_entropy_f32_i64_subgroups -DCROSS_ENTROPY=1 -DI=int64_t -DSUBGROUPS=1
// kestrel-variant: softmax_cross_entropy_f16_i32 -DCROSS_ENTROPY=1 -DI=int -DSTORE_T=float16_t
// kestrel-variant: softmax_cross_entropy_f16_i32_subgroups -DCROSS_ENTROPY=1 -DI=int -DSTORE_T=float16_t -DSUBGROUPS=1
// kestrel-variant: softmax_cross_entropy_f16_i64 -DCROSS_ENTROPY=1 -DI=int64_t -DSTORE_T=float16_t
// kestrel-variant: softmax_cross_entropy_f16_i64_subgroups -DCROSS_ENTROPY=1 -DI=int64_t -DSTORE_T=float16_t -DSUBGROUPS=1
// kestrel-variant: softmax_cross_entropy_bf16_i32 -DCROSS_ENTROPY=1 -DI=int -DBF16=1
// kestrel-variant: softmax_cross_entropy_bf16_i32_subgroups -DCROSS_ENTROPY=1 -DI=int -DBF16=1 -DSUBGROUPS=1
// kestrel-variant: softmax_cross_entropy_bf16_i64 -DCROSS_ENTROPY=1 -DI=int64_t -DBF16=1
// kestrel-variant: softmax_cross_entropy_bf16_i64_subgroups -DCROSS_ENTROPY=1 -DI=int64_t -DBF16=1 -DSUBGROUPS=1
// kestrel-variant: cross_entropy_backward_f32_i32 -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int
// kestrel-variant: cross_entropy_backward_f32_i32_subgroups -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int -DSUBGROUPS=1
// kestrel-variant: cross_entropy_backward_f32_i64 -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int64_t
// kestrel-variant: cross_entropy_backward_f32_i64_subgroups -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int64_t -DSUBGROUPS=1
// kestrel-variant: cross_entropy_backward_f16_i32 -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int -DSTORE_T=float16_t
// kestrel-variant: cross_entropy_backward_f16_i32_subgroups -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int -DSTORE_T=float16_t -DSUBGROUPS=1
// kestrel-variant: cross_entropy_backward_f16_i64 -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int64_t -DSTORE_T=float16_t
// kestrel-variant: cross_entropy_backward_f16_i64_subgroups -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int64_t -DSTORE_T=float16_t -DSUBGROUPS=1
// kestrel-variant: cross_entropy_backward_bf16_i32 -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int -DBF16=1
// kestrel-variant: cross_entropy_backward_bf16_i32_subgroups -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int -DBF16=1 -DSUBGROUPS=1
// kestrel-variant: cross_entropy_backward_bf16_i64 -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int64_t -DBF16=1
// kestrel-variant: cross_entropy_backward_bf16_i64_subgroups -DCROSS_ENTROPY=1 -DBACKWARD=1 -DI=int64_t -DBF16=1 -DSUBGROUPS=1
#define T float
#if !defined(STORE_T) && !defined(BF16)
#define STORE_T float
#endif
#include "common.glsl"
#include "math.glsl"
#include "workgroup_fold.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) readonly buffer In { STORE_T data[]; } in_buf;
#ifdef CROSS_ENTROPY
layout(std430, set = 0, binding = 2) readonly buffer Labels { I data[]; } label_buf;
#ifdef BACKWARD
layout(std430, set = 0, binding = 3) readonly buffer Scales { float data[]; } scale_buf;
#else
layout(std430, set = 0, binding = 3) writeonly buffer Loss { float data[]; } loss_buf;
#endif
layout(std430, set = 0, binding = 4) writeonly buffer Grad { STORE_T data[]; } grad_buf;
#else
layout(std430, set = 0, binding = 2) writeonly buffer Out { float data[]; } out_buf;
#endif

void main() {
  // Every invocation of a workgroup has the same row, so the barriers are in uniform control flow.
  uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= PUINT(1)) return;
  uint lid = gl_LocalInvocationID.x;
  uint cols = PUINT(0);
  uint base = P.tensors[0].offset + row * cols;

  // Column 0 seeds every share: folding it twice does not change a max.
  float top = LOAD(in_buf.data[base]);
  for (uint j = lid; j < cols; j += KESTREL_LOCAL_SIZE) top = nan_max(top, LOAD(in_buf.data[base + j]));
  top = workgroup_fold(FOLD_MAX, top);
  float sum = 0.0;
  for (uint j = lid; j < cols; j += KESTREL_LOCAL_SIZE) sum += exp(LOAD(in_buf.data[base + j]) - top);
  sum = workgroup_fold(FOLD_SUM, sum);
  float log_sum = log(sum);

#if defined(CROSS_ENTROPY) && defined(BACKWARD)
  int64_t label = int64_t(label_buf.data[P.tensors[1].offset + row]);
  float scale = scale_buf.data[P.tensors[2].offset + row * PUINT(2)];
  uint grad_base = P.tensors[3].offset + row * cols;
  for (uint j = lid; j < cols; j += KESTREL_LOCAL_SIZE) {
    float p = exp(LOAD(in_buf.data[base + j]) - top - log_sum);
    grad_buf.data[grad_base + j] = STORE((p - (int64_t(j) == label ? 1.0 : 0.0)) * scale);
  }
#elif defined(CROSS_ENTROPY)
  int64_t label = int64_t(label_buf.data[P.tensors[1].offset + row]);
  bool valid = label >= 0 && label < int64_t(cols);
  if (lid == 0) {
    float picked = valid ? LOAD(in_buf.data[base + uint(label)]) - top : K_NAN;
    loss_buf.data[P.tensors[2].offset + row] = log_sum - picked;
  }
  if (PINT(0) != 0) {
    uint grad_base = P.tensors[3].offset + row * cols;
    for (uint j = lid; j < cols; j += KESTREL_LOCAL_SIZE) {
      float p = exp(LOAD(in_buf.data[base + j]) - top - log_sum);
      grad_buf.data[grad_base + j] = STORE(valid ? p - (int64_t(j) == label ? 1.0 : 0.0) : K_NAN);
    }
  }
#else
  bool log_output = PINT(0) != 0;
  uint out_base = P.tensors[1].offset + row * cols;
  for (uint j = lid; j < cols; j += KESTREL_LOCAL_SIZE) {
    float shifted = LOAD(in_buf.data[base + j]) - top;
    out_buf.data[out_base + j] = log_output ? shifted - log_sum : exp(shifted) / sum;
  }
#endif
}
