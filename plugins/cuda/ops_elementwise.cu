// fill, copy (with casts), unary and binary element-wise ops.
//
// To keep compile times short, unary and binary kernels are instantiated once per dtype and pick the
// function with a switch on a kernel argument: every thread takes the same branch, so the cost is a few
// instructions per element of a memory-bound kernel, against 17 x 7 + 13 x 7 separate instantiations.
#include <cmath>
#include <cstring>

#include "elementwise_packed.cuh"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cuda {

namespace {

// d gelu(x) / dx for the exact erf form: Phi(x) + x phi(x) (UNARY's GELU_GRAD, BINARY's GELU_BACKWARD).
template <class C>
__device__ __forceinline__ C gelu_grad(C x) {
  const C cdf = C(0.5) * (C(1) + erf(x * C(0.70710678118654752440)));
  const C pdf = exp(C(-0.5) * x * x) * C(0.3989422804014327);  // 1/sqrt(2*pi)
  return cdf + x * pdf;
}

template <class E>
__global__ void fill_kernel(Indexer<1> ix, typename E::storage* y, int64_t n, typename E::storage value) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    y[off[0]] = value;
  }
}

template <class From, class To>
__global__ void copy_kernel(Indexer<2> ix, const typename From::storage* x, typename To::storage* y, int64_t n) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    y[off[1]] = To::store(static_cast<typename To::compute>(From::load(x[off[0]])));
  }
}

// ---- unary functions ----
template <class C>
struct UnaryFn {
  int fn;
  C alpha, beta;

  __device__ __forceinline__ C operator()(C x) const {
    switch (fn) {
      case KESTREL_UNARY_NEG: return C(-x);
      case KESTREL_UNARY_ABS: return C(x < 0 ? -x : x);
      case KESTREL_UNARY_RELU: return C(x < 0 ? C(0) : x);  // keeps NaN
      case KESTREL_UNARY_STEP: return C(x > 0 ? 1 : 0);
      case KESTREL_UNARY_SQUARE: return C(x * x);
      case KESTREL_UNARY_SIGN: return C(x != x ? x : C((x > 0) - (x < 0)));
      default: break;
    }
    if constexpr (std::is_floating_point<C>::value) {
      // Overloads of the CUDA math library: float calls expf etc., double the f64 versions. No fast-math
      // intrinsics, so results stay within a few ulp of the double-precision reference.
      switch (fn) {
        case KESTREL_UNARY_EXP: return exp(x);
        case KESTREL_UNARY_LOG: return log(x);
        case KESTREL_UNARY_SQRT: return sqrt(x);
        case KESTREL_UNARY_RSQRT: return C(1) / sqrt(x);
        case KESTREL_UNARY_TANH: return tanh(x);
        case KESTREL_UNARY_SIGMOID: return C(1) / (C(1) + exp(-x));
        case KESTREL_UNARY_GELU: return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440)));
        case KESTREL_UNARY_GELU_GRAD: return gelu_grad(x);
        case KESTREL_UNARY_RECIPROCAL: return C(1) / x;
        case KESTREL_UNARY_AFFINE: return alpha * x + beta;
        case KESTREL_UNARY_POW: return pow(x, alpha);
        default: break;
      }
    }
    return x;  // unreachable: supports_unary rejects other functions
  }
};

template <class E>
__global__ void unary_kernel(Indexer<2> ix, const typename E::storage* x, typename E::storage* y, int64_t n,
                             UnaryFn<typename E::compute> f) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    y[off[1]] = E::store(f(E::load(x[off[0]])));
  }
}

// ---- binary functions ----
template <class C>
__device__ __forceinline__ C binary_apply(int fn, C x, C y) {
  switch (fn) {
    case KESTREL_BINARY_ADD: return C(x + y);
    case KESTREL_BINARY_SUB: return C(x - y);
    case KESTREL_BINARY_MUL: return C(x * y);
    case KESTREL_BINARY_MAX: return nan_max(x, y);
    case KESTREL_BINARY_MIN: return nan_min(x, y);
    case KESTREL_BINARY_EQ: return C(x == y);
    case KESTREL_BINARY_NE: return C(x != y);
    case KESTREL_BINARY_LT: return C(x < y);
    case KESTREL_BINARY_LE: return C(x <= y);
    case KESTREL_BINARY_GT: return C(x > y);
    case KESTREL_BINARY_GE: return C(x >= y);
    default: break;
  }
  if constexpr (std::is_floating_point<C>::value) {
    if (fn == KESTREL_BINARY_DIV) return x / y;
    if (fn == KESTREL_BINARY_POW) return pow(x, y);
    if (fn == KESTREL_BINARY_RELU_BACKWARD) return x * C(y > C(0));  // x = dy, y = relu's output
    if (fn == KESTREL_BINARY_GELU_BACKWARD) return x * gelu_grad(y);  // y = gelu's input
  }
  return x;  // unreachable: supports_binary rejects other functions
}

template <class E>
__global__ void binary_kernel(Indexer<3> ix, const typename E::storage* a, const typename E::storage* b,
                              typename E::storage* y, int64_t n, int fn) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    y[off[2]] = E::store(binary_apply<typename E::compute>(fn, E::load(a[off[0]]), E::load(b[off[1]])));
  }
}

// out (f32) = a (f32) + b (16-bit, widened as it is read): ABI 1.15's widening add, any strides.
template <class B>
__global__ void widening_add_kernel(Indexer<3> ix, const float* a, const typename B::storage* b, float* y, int64_t n) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    y[off[2]] = a[off[0]] + B::load(b[off[1]]);
  }
}
template <class B>
struct WideningAddFn {
  __device__ __forceinline__ float operator()(float a, typename B::storage b) const { return a + B::load(b); }
};

// The functions above on storage values, for the packed kernels (elementwise_packed.cuh).
template <class From, class To>
struct CastFn {
  __device__ __forceinline__ typename To::storage operator()(typename From::storage v) const {
    return To::store(static_cast<typename To::compute>(From::load(v)));
  }
};
template <class E>
struct UnaryStorageFn {
  UnaryFn<typename E::compute> f;
  __device__ __forceinline__ typename E::storage operator()(typename E::storage v) const { return E::store(f(E::load(v))); }
};
template <class E>
struct BinaryStorageFn {
  int fn;
  __device__ __forceinline__ typename E::storage operator()(typename E::storage a, typename E::storage b) const {
    return E::store(binary_apply<typename E::compute>(fn, E::load(a), E::load(b)));
  }
};

// Whether the packed kernels may run over `ix` for operands at `bases` of element sizes `sizes`, packs
// holding `per_pack` elements.
template <int N>
bool packed(const Indexer<N>& ix, const char* const (&bases)[N], const size_t (&sizes)[N], int per_pack) {
  int pack_bytes[N];
  for (int k = 0; k < N; ++k) pack_bytes[k] = int(sizes[k]) * per_pack;
  return !generic_elementwise() && packable(ix, bases, pack_bytes);
}

}  // namespace

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail_cuda(err, what);
}

bool supports_fill(const kestrel_op& op) { return kestrel::plugin_shapes::fill_fits(op); }

void launch_fill(kestrel_stream& s, const kestrel_op& op) {
  const double value = params_of<kestrel_fill_params>(op, "fill").value;
  const TensorRef out = ref(op.outputs[0]);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using C = typename E::compute;
    // Convert on the host with the same rules as the kernels (E::store is device code, so do it here).
    S stored{};
    if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>) {
      float f = float(value);
      if constexpr (std::is_same_v<E, F16>) {
        stored = __half_as_ushort(__float2half_rn(f));
      } else {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
          stored = uint16_t((u >> 16) | 0x40u);
        } else {
          u += 0x7fffu + ((u >> 16) & 1u);
          stored = uint16_t(u >> 16);
        }
      }
    } else {
      stored = static_cast<S>(static_cast<C>(value));
    }
    const int64_t* strides[1] = {out.strides};
    Indexer<1> ix = make_indexer<1>(out.rank, out.shape, strides);
    constexpr int per_pack = pack_elements<S>();
    if (packed<1>(ix, {out.base}, {sizeof(S)}, per_pack))
      fill_packed<S><<<grid_for(n / per_pack + 1), kBlock, 0, s.cuda>>>(reinterpret_cast<S*>(out.base), n, stored);
    else
      fill_kernel<E><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<S*>(out.base), n, stored);
  });
  check_launch("fill");
}

bool supports_copy(const kestrel_op& op) { return kestrel::plugin_shapes::copy_fits(op); }

void strided_copy(kestrel_stream& s, const TensorRef& in, const TensorRef& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t* strides[2] = {in.strides, out.strides};
  const Indexer<2> ix = make_indexer<2>(out.rank, out.shape, strides);
  dispatch(in.dtype, [&](auto from) {
    dispatch(out.dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      using X = typename From::storage;
      using Y = typename To::storage;
      constexpr int per_pack = pack_elements<X, Y>();
      if (packed<2>(ix, {in.base, out.base}, {sizeof(X), sizeof(Y)}, per_pack))
        map_packed<<<grid_for(n / per_pack + 1), kBlock, 0, s.cuda>>>(reinterpret_cast<const X*>(in.base),
                                                                      reinterpret_cast<Y*>(out.base), n, CastFn<From, To>{});
      else
        copy_kernel<From, To><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<const X*>(in.base),
                                                                   reinterpret_cast<Y*>(out.base), n);
    });
  });
  check_launch("copy");
}

void launch_copy(kestrel_stream& s, const kestrel_op& op) { strided_copy(s, ref(op.inputs[0]), ref(op.outputs[0])); }

bool supports_unary(const kestrel_op& op) { return kestrel::plugin_shapes::unary_fits(op); }

void launch_unary(kestrel_stream& s, const kestrel_op& op) {
  const auto& p = params_of<kestrel_unary_params>(op, "unary");
  unary_into(s, ref(op.inputs[0]), ref(op.outputs[0]), int(p.fn), p.alpha, p.beta);
}

void unary_into(kestrel_stream& s, const TensorRef& in, const TensorRef& out, int fn, double alpha, double beta) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t* strides[2] = {in.strides, out.strides};
  const Indexer<2> ix = make_indexer<2>(out.rank, out.shape, strides);
  dispatch(in.dtype, [&](auto elem) {
    using E = decltype(elem);
    using C = typename E::compute;
    using S = typename E::storage;
    UnaryFn<C> f{fn, static_cast<C>(alpha), static_cast<C>(beta)};
    constexpr int per_pack = pack_elements<S>();
    if (packed<2>(ix, {in.base, out.base}, {sizeof(S), sizeof(S)}, per_pack))
      map_packed<<<grid_for(n / per_pack + 1), kBlock, 0, s.cuda>>>(reinterpret_cast<const S*>(in.base),
                                                                    reinterpret_cast<S*>(out.base), n, UnaryStorageFn<E>{f});
    else
      unary_kernel<E><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<const S*>(in.base),
                                                           reinterpret_cast<S*>(out.base), n, f);
  });
  check_launch("unary");
}

bool supports_binary(const kestrel_op& op) { return kestrel::plugin_shapes::binary_fits(op, /*widening_add=*/true); }

void launch_binary(kestrel_stream& s, const kestrel_op& op) {
  const int fn = params_of<kestrel_binary_params>(op, "binary").fn;
  const TensorRef a = ref(op.inputs[0]), b = ref(op.inputs[1]), out = ref(op.outputs[0]);
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t* strides[3] = {a.strides, b.strides, out.strides};
  const Indexer<3> ix = make_indexer<3>(out.rank, out.shape, strides);
  if (b.dtype != out.dtype) {  // ABI 1.15: f32 + f16/bf16 (binary_fits allows nothing else)
    auto widening = [&](auto narrow) {
      using B = decltype(narrow);
      using SB = typename B::storage;
      const auto* left = reinterpret_cast<const float*>(a.base);
      const auto* right = reinterpret_cast<const SB*>(b.base);
      auto* y = reinterpret_cast<float*>(out.base);
      constexpr int per_pack = pack_elements<float, SB>();
      if (packed<3>(ix, {a.base, b.base, out.base}, {sizeof(float), sizeof(SB), sizeof(float)}, per_pack))
        zip_packed<<<grid_for(n / per_pack + 1), kBlock, 0, s.cuda>>>(left, right, y, n, WideningAddFn<B>{});
      else
        widening_add_kernel<B><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, left, right, y, n);
    };
    if (b.dtype == KESTREL_DTYPE_BF16)
      widening(BF16{});
    else
      widening(F16{});
    check_launch("binary (widening add)");
    return;
  }
  dispatch(out.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    constexpr int per_pack = pack_elements<S>();
    if (packed<3>(ix, {a.base, b.base, out.base}, {sizeof(S), sizeof(S), sizeof(S)}, per_pack))
      zip_packed<<<grid_for(n / per_pack + 1), kBlock, 0, s.cuda>>>(
          reinterpret_cast<const S*>(a.base), reinterpret_cast<const S*>(b.base), reinterpret_cast<S*>(out.base), n,
          BinaryStorageFn<E>{fn});
    else
      binary_kernel<E><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<const S*>(a.base),
                                                            reinterpret_cast<const S*>(b.base),
                                                            reinterpret_cast<S*>(out.base), n, fn);
  });
  check_launch("binary");
}

}  // namespace kestrel_cuda
