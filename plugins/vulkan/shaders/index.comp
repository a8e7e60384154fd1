#version 450
// gather, scatter_add and the index range check that runs before either (so a bad index is reported
// before anything is written). ints[0] = axis.
//   gather:      tensors[0] data, [1] index, [2] out (index's shape); one invocation per output
//   scatter_add: tensors[0] src, [1] index, [2] out (updated in place). One invocation per "line":
//                a position of every axis but `axis`, walking the index along `axis` in order. Lines
//                write disjoint elements of out (they differ off the axis), so no atomics are needed
//                and the sums are deterministic, for every dtype.
//   check:       tensors[0] index, uints[0] = axis extent, uints[1] = first flag word: flags the first
//                bad value it sees in words first..first+3 (flag, value low, value high, extent).
// kestrel-variant: gather_f32_i32 -DGATHER=1 -DT=float -DI=int
// kestrel-variant: gather_f32_i64 -DGATHER=1 -DT=float -DI=int64_t
// kestrel-variant: gather_i32_i32 -DGATHER=1 -DT=int -DI=int
// kestrel-variant: gather_i32_i64 -DGATHER=1 -DT=int -DI=int64_t
// kestrel-variant: gather_i64_i32 -DGATHER=1 -DT=int64_t -DI=int
// kestrel-variant: gather_i64_i64 -DGATHER=1 -DT=int64_t -DI=int64_t
// kestrel-variant: scatter_add_f32_i32 -DSCATTER=1 -DT=float -DI=int
// kestrel-variant: scatter_add_f32_i64 -DSCATTER=1 -DT=float -DI=int64_t
// kestrel-variant: scatter_add_i32_i32 -DSCATTER=1 -DT=int -DI=int
// kestrel-variant: scatter_add_i32_i64 -DSCATTER=1 -DT=int -DI=int64_t
// kestrel-variant: scatter_add_i64_i32 -DSCATTER=1 -DT=int64_t -DI=int
// kestrel-variant: scatter_add_i64_i64 -DSCATTER=1 -DT=int64_t -DI=int64_t
// kestrel-variant: index_check_i32 -DCHECK=1 -DI=int
// kestrel-variant: index_check_i64 -DCHECK=1 -DI=int64_t
#include "common.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;

#ifdef CHECK
layout(std430, set = 0, binding = 1) readonly buffer Index { I data[]; } index_buf;
layout(std430, set = 0, binding = 2) buffer Flag { uint data[]; } flag_buf;

void element(uint i) {
  int64_t v = int64_t(index_buf.data[element_offset(0, i)]);
  if (v < 0 || v >= int64_t(PUINT(0))) {
    uint first = PUINT(1);
    if (atomicCompSwap(flag_buf.data[first], 0u, 1u) == 0u) {
      flag_buf.data[first + 1] = uint(uint64_t(v) & 0xffffffffUL);
      flag_buf.data[first + 2] = uint(uint64_t(v) >> 32);
      flag_buf.data[first + 3] = PUINT(0);
    }
  }
}

void main() {
  for (uint i = flat_index(); i < P.tensors[0].numel; i += flat_stride()) element(i);
}
#else
layout(std430, set = 0, binding = 1) readonly buffer Data { T data[]; } data_buf;  // gather: data; scatter: src
layout(std430, set = 0, binding = 2) readonly buffer Index { I data[]; } index_buf;
layout(std430, set = 0, binding = 3) buffer Out { T data[]; } out_buf;

#ifdef GATHER
void element(uint i) {
  int axis = PINT(0);
  uint v = uint(index_buf.data[element_offset(1, i)]);
  // Out-of-range (and negative, which wrap to huge) indices read nothing: captured launches check them
  // after the fact (eager ones before), so this keeps memory safe meanwhile.
  if (v >= SHAPE(0, axis)) {
    out_buf.data[element_offset(2, i)] = T(0);
    return;
  }
  uint rest = i, source = P.tensors[0].offset;
  for (int d = P.tensors[1].rank - 1; d >= 0; --d) {
    uint extent = SHAPE(1, d);
    uint coordinate = rest % extent;
    rest /= extent;
    source += (d == axis ? v : coordinate) * STRIDE(0, d);
  }
  out_buf.data[element_offset(2, i)] = data_buf.data[source];
}

void main() {
  for (uint i = flat_index(); i < P.tensors[2].numel; i += flat_stride()) element(i);
}
#else
void scatter_line(uint line) {
  int axis = PINT(0);
  uint rest = line, src_at = P.tensors[0].offset, index_at = P.tensors[1].offset, out_at = P.tensors[2].offset;
  for (int d = P.tensors[1].rank - 1; d >= 0; --d) {
    if (d == axis) continue;
    uint extent = SHAPE(1, d);
    uint coordinate = rest % extent;
    rest /= extent;
    src_at += coordinate * STRIDE(0, d);
    index_at += coordinate * STRIDE(1, d);
    out_at += coordinate * STRIDE(2, d);
  }
  uint along = SHAPE(1, axis);
  for (uint j = 0; j < along; ++j) {
    uint v = uint(index_buf.data[index_at + j * STRIDE(1, axis)]);
    if (v >= SHAPE(2, axis)) continue;  // out of range: skipped (see gather)
    uint target = out_at + v * STRIDE(2, axis);
    out_buf.data[target] += data_buf.data[src_at + j * STRIDE(0, axis)];
  }
}

void main() {
  for (uint line = flat_index(); line < PUINT(0); line += flat_stride()) scatter_line(line);
}
#endif
#endif
