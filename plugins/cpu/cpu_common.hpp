// Shared pieces of the CPU plugin: buffers, errors, dtype dispatch and strided indexing.
#pragma once
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kestrel/half.h"
#include "kestrel/plugin.h"
#include "kestrel/plugin_errors.hpp"
#include "kestrel/plugin_shapes.hpp"

namespace kestrel_cpu {

using Exec = Kokkos::DefaultHostExecutionSpace;
using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>;

struct Context;

}  // namespace kestrel_cpu

// The opaque ABI types, defined for this plugin. Host memory is device memory here.
struct kestrel_buffer {
  kestrel_cpu::Context* context;
  void* data;
  uint64_t bytes;
};

namespace kestrel_cpu {

// Thrown inside the plugin, turned into a status + last_error at the ABI boundary (guarded, cpu_plugin.cpp).
using kestrel::plugin_errors::fail;
using kestrel::plugin_errors::Failure;

// ---- element types: storage type, compute type, and conversions between them ----
template <class S, class C>
struct ElemBase {
  using storage = S;
  using compute = C;
  static constexpr bool is_float = std::is_floating_point<C>::value;
};
struct F32 : ElemBase<float, float> {
  static float load(float s) { return s; }
  static float store(float c) { return c; }
};
struct F64 : ElemBase<double, double> {
  static double load(double s) { return s; }
  static double store(double c) { return c; }
};
struct F16 : ElemBase<uint16_t, float> {
  static float load(uint16_t s) { return kestrel_f16_to_f32(s); }
  static uint16_t store(float c) { return kestrel_f32_to_f16(c); }
};
struct BF16 : ElemBase<uint16_t, float> {
  static float load(uint16_t s) { return kestrel_bf16_to_f32(s); }
  static uint16_t store(float c) { return kestrel_f32_to_bf16(c); }
};
struct I32 : ElemBase<int32_t, int64_t> {
  static int64_t load(int32_t s) { return s; }
  static int32_t store(int64_t c) { return static_cast<int32_t>(c); }
};
struct I64 : ElemBase<int64_t, int64_t> {
  static int64_t load(int64_t s) { return s; }
  static int64_t store(int64_t c) { return c; }
};
struct U8 : ElemBase<uint8_t, int64_t> {
  static int64_t load(uint8_t s) { return s; }
  static uint8_t store(int64_t c) { return static_cast<uint8_t>(c); }
};

// Calls fn(Elem{}) with the element type of `dtype`.
template <class Fn>
decltype(auto) dispatch(kestrel_dtype dtype, Fn&& fn) {
  switch (dtype) {
    case KESTREL_DTYPE_F32: return fn(F32{});
    case KESTREL_DTYPE_F64: return fn(F64{});
    case KESTREL_DTYPE_F16: return fn(F16{});
    case KESTREL_DTYPE_BF16: return fn(BF16{});
    case KESTREL_DTYPE_I32: return fn(I32{});
    case KESTREL_DTYPE_I64: return fn(I64{});
    case KESTREL_DTYPE_U8: return fn(U8{});
    default: fail("unknown dtype code " + std::to_string(static_cast<int>(dtype)));
  }
}

// Calls fn(Elem{}) for the floating dtypes only.
template <class Fn>
decltype(auto) dispatch_float(kestrel_dtype dtype, Fn&& fn) {
  switch (dtype) {
    case KESTREL_DTYPE_F32: return fn(F32{});
    case KESTREL_DTYPE_F64: return fn(F64{});
    case KESTREL_DTYPE_F16: return fn(F16{});
    case KESTREL_DTYPE_BF16: return fn(BF16{});
    default: fail("this op needs a floating-point dtype");
  }
}

inline bool is_float_dtype(kestrel_dtype d) {
  return d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F64 || d == KESTREL_DTYPE_F16 || d == KESTREL_DTYPE_BF16;
}
inline bool is_index_dtype(kestrel_dtype d) { return d == KESTREL_DTYPE_I64 || d == KESTREL_DTYPE_I32; }
inline bool is_valid_dtype(kestrel_dtype d) { return d >= 0 && d < KESTREL_DTYPE_COUNT; }

// ---- strided views ----
// A tensor descriptor resolved to a typed base pointer; element (i0..in) is at base[sum(i_d * stride_d)].
template <class S>
struct View {
  S* base;
  int rank;
  int64_t shape[KESTREL_MAX_RANK];
  int64_t strides[KESTREL_MAX_RANK];
  int64_t numel;
  bool contiguous;

  // Offset of the element with row-major linear index `linear`.
  int64_t at(int64_t linear) const {
    if (contiguous) return linear;
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t extent = shape[d];
      off += (linear % extent) * strides[d];
      linear /= extent;
    }
    return off;
  }
};


// Shared with every backend (kestrel/plugin_shapes.hpp).
using kestrel::plugin_shapes::all_contiguous;
using kestrel::plugin_shapes::is_contiguous;
using kestrel::plugin_shapes::numel;
using kestrel::plugin_shapes::same_shape;

inline size_t dtype_bytes(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F32: case KESTREL_DTYPE_I32: return 4;
    case KESTREL_DTYPE_F16: case KESTREL_DTYPE_BF16: return 2;
    case KESTREL_DTYPE_U8: return 1;
    default: return 8;
  }
}

// Checks that every element the descriptor can reach lies inside its buffer.
void check_bounds(const kestrel_tensor& t, const char* role);

template <class S>
View<S> view_of(const kestrel_tensor& t) {
  View<S> v{};
  v.base = static_cast<S*>(t.buffer->data) + t.offset;
  v.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides[d];
  }
  v.numel = numel(t);
  v.contiguous = is_contiguous(t);
  return v;
}


template <class P>
const P& params_of(const kestrel_op& op, const char* name) {
  const P* p = static_cast<const P*>(op.params);
  if (!p || p->struct_size < sizeof(P)) fail(std::string(name) + ": missing or too-small parameter block");
  return *p;
}

// NaN-propagating max/min, as torch.maximum/minimum.
template <class T>
KOKKOS_INLINE_FUNCTION T nan_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T>
KOKKOS_INLINE_FUNCTION T nan_min(T a, T b) { return (a < b || a != a) ? a : b; }

}  // namespace kestrel_cpu
