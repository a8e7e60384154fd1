// fill, and copy with casts between any two dtypes.
#include <algorithm>

#include "cpu_half_rows.hpp"
#include "cpu_ops.hpp"

namespace kestrel_cpu {

bool supports_fill(const kestrel_op& op) {
  return kestrel::plugin_shapes::fill_fits(op);
}

void launch_fill(const kestrel_op& op) {
  double value = params_of<kestrel_fill_params>(op, "fill").value;
  const kestrel_tensor& out = op.outputs[0];
  dispatch(out.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using C = typename E::compute;
    const S stored = E::store(static_cast<C>(value));
    View<S> y = view_of<S>(out);
    if (y.contiguous)
      parallel_chunks("kestrel::fill", y.numel, y.numel, [=](int64_t begin, int64_t end) {
        std::fill(y.base + begin, y.base + end, stored);
      });
    else
      parallel_for_split("kestrel::fill", y.numel, y.numel, [=](int64_t i) { y.base[y.at(i)] = stored; });
  });
}

bool supports_copy(const kestrel_op& op) { return kestrel::plugin_shapes::copy_fits(op); }

void launch_copy(const kestrel_op& op) {
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  dispatch(in.dtype, [&](auto from) {
    dispatch(out.dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      View<typename From::storage> x = view_of<typename From::storage>(in);
      View<typename To::storage> y = view_of<typename To::storage>(out);
      // Row by row (see map_unary): transposes and broadcasts are the common strided copies.
      coalesce(y, x);
      const int64_t inner = inner_extent(y.rank, y.shape), rows = inner ? y.numel / inner : 0;
      const int64_t xs = inner_stride(x.rank, x.strides), ys = inner_stride(y.rank, y.strides);
      parallel_for_split("kestrel::copy", rows, y.numel, [=](int64_t r) {
        const auto* xr = x.base + x.at(r * inner);
        auto* yr = y.base + y.at(r * inner);
        if constexpr (std::is_same_v<From, F32> && std::is_same_v<To, F16>) {  // mixed precision's casts
          if (xs == 1 && ys == 1) return round_row<F16>(xr, yr, inner);
        } else if constexpr (std::is_same_v<From, F16> && std::is_same_v<To, F32>) {
          if (xs == 1 && ys == 1) return widen_row<F16>(xr, yr, inner);
        }
        for (int64_t j = 0; j < inner; ++j)
          yr[j * ys] = To::store(static_cast<typename To::compute>(From::load(xr[j * xs])));
      });
    });
  });
}

}  // namespace kestrel_cpu
