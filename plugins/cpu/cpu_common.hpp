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
#include "kestrel/plugin_boundary.hpp"

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

// Thrown inside the plugin, turned into a status + last_error at the ABI boundary.
using kestrel::plugin_errors::fail;
using kestrel::plugin_errors::Failure;
inline constexpr char kPluginName[] = "cpu";
// Every entry runs in Boundary::guarded: the one place where C++ errors cross into the C ABI.
using Boundary = kestrel::plugin_errors::ErrorBoundary<kPluginName>;

// ---- element types: storage type, compute type, and conversions between them ----
using kestrel::plugin_sdk::ElemBase;
struct F32 : ElemBase<float, float, KESTREL_DTYPE_F32> {
  static float load(float s) { return s; }
  static float store(float c) { return c; }
};
struct F64 : ElemBase<double, double, KESTREL_DTYPE_F64> {
  static double load(double s) { return s; }
  static double store(double c) { return c; }
};
struct F16 : ElemBase<uint16_t, float, KESTREL_DTYPE_F16> {
  static float load(uint16_t s) { return kestrel_f16_to_f32(s); }
  static uint16_t store(float c) { return kestrel_f32_to_f16(c); }
};
struct BF16 : ElemBase<uint16_t, float, KESTREL_DTYPE_BF16> {
  static float load(uint16_t s) { return kestrel_bf16_to_f32(s); }
  static uint16_t store(float c) { return kestrel_f32_to_bf16(c); }
};
struct I32 : ElemBase<int32_t, int64_t, KESTREL_DTYPE_I32> {
  static int64_t load(int32_t s) { return s; }
  static int32_t store(int64_t c) { return static_cast<int32_t>(c); }
};
struct I64 : ElemBase<int64_t, int64_t, KESTREL_DTYPE_I64> {
  static int64_t load(int64_t s) { return s; }
  static int64_t store(int64_t c) { return c; }
};
struct U8 : ElemBase<uint8_t, int64_t, KESTREL_DTYPE_U8> {
  static int64_t load(uint8_t s) { return s; }
  static uint8_t store(int64_t c) { return static_cast<uint8_t>(c); }
};

// Calls fn(Elem{}) with the element type of a dtype (kestrel/plugin_boundary.hpp).
constexpr kestrel::plugin_sdk::Dispatch<F32, F64, F16, BF16, I32, I64, U8> dispatch{"a dtype the cpu backend knows"};
constexpr kestrel::plugin_sdk::Dispatch<F32, F64, F16, BF16> dispatch_float{"a floating-point dtype"};

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


// Shared with every backend (kestrel/plugin_shapes.hpp, kestrel/plugin_boundary.hpp).
using kestrel::plugin_sdk::check_in_buffer;
using kestrel::plugin_sdk::params_of;
using kestrel::plugin_shapes::all_contiguous;
using kestrel::plugin_shapes::arity;
using kestrel::plugin_shapes::dtype_bytes;
using kestrel::plugin_shapes::is_contiguous;
using kestrel::plugin_shapes::is_float_dtype;
using kestrel::plugin_shapes::is_index_dtype;
using kestrel::plugin_shapes::numel;
using kestrel::plugin_shapes::same_shape;

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

// A tensor's first element, for kernels that index contiguous data themselves.
template <class S>
const S* data_of(const kestrel_tensor& t) { return static_cast<const S*>(t.buffer->data) + t.offset; }
template <class S>
S* mutable_data_of(const kestrel_tensor& t) { return static_cast<S*>(t.buffer->data) + t.offset; }

// The arithmetic type of the fused kernels, and of the statistics they keep
// (plugin_shapes::statistics_dtype): double for f64, float for f32 and 16-bit storage.
template <class E>
using Acc = std::conditional_t<std::is_same_v<typename E::storage, double>, double, float>;


// NaN-propagating max/min, as torch.maximum/minimum.
template <class T>
KOKKOS_INLINE_FUNCTION T nan_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T>
KOKKOS_INLINE_FUNCTION T nan_min(T a, T b) { return (a < b || a != a) ? a : b; }

// d gelu(x) / dx for the exact erf form: Phi(x) + x phi(x) (UNARY's GELU_GRAD, BINARY's GELU_BACKWARD).
template <class T>
inline T gelu_grad(T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
  const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1/sqrt(2*pi)
  return cdf + x * pdf;
}

}  // namespace kestrel_cpu
