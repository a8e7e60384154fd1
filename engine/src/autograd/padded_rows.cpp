#include "padded_rows.h"

#include <algorithm>

#include "../tensor/storage.h"

namespace kestrel::fn {

namespace {
// The stride between x's rows, x (..., C) with its innermost axis contiguous and every other axis a whole
// number of rows apart in order; nothing when x's rows are not evenly spaced so.
std::optional<int64_t> row_stride(const Tensor& x) {
  const int last = x.rank() - 1;
  if (last < 1 || (x.shape()[last] > 1 && x.strides()[last] != 1)) return std::nullopt;
  std::optional<int64_t> row;  // the innermost outer axis's stride
  int64_t expected = 0;        // the stride the next outer axis must have
  for (int d = last - 1; d >= 0; --d) {
    if (x.shape()[d] == 1) continue;  // any stride reads the same elements
    if (x.strides()[d] <= 0) return std::nullopt;  // a broadcast (expand's stride 0) repeats rows
    if (!row) row = expected = x.strides()[d];
    if (x.strides()[d] != expected) return std::nullopt;
    expected *= x.shape()[d];
  }
  return row.value_or(x.shape()[last]);
}
}  // namespace

std::optional<Tensor> rows_view(const Tensor& x, const Shape& shape) {
  if (x.is_contiguous() || shape.empty() || shape.back() != x.shape().back() || shape_numel(shape) != x.numel())
    return std::nullopt;
  for (int64_t extent : shape)
    if (extent < 0) return std::nullopt;
  const std::optional<int64_t> row = row_stride(x);
  if (!row || *row < x.shape().back()) return std::nullopt;
  Shape strides(shape.size(), 1);
  int64_t stride = *row;
  for (size_t d = shape.size() - 1; d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return x.as_strided(shape, strides, x.offset());
}

Tensor rows_reshaped(const Tensor& x, const Shape& shape) {
  if (std::optional<Tensor> view = rows_view(x, shape)) return *view;
  return x.reshape(shape);
}

Tensor empty_like_rows(const Tensor& x) {
  const std::optional<int64_t> row = row_stride(x);
  // A padded product's rows are a few elements wider; a narrow slice of wide rows gets a tensor of its own
  // width rather than a buffer of mostly unused columns.
  const bool padded = row && *row > x.size(1) && *row - x.size(1) <= std::max<int64_t>(64, x.size(1) / 8);
  if (x.is_contiguous() || x.rank() != 2 || !padded) return Tensor::empty(x.shape(), x.dtype(), x.device());
  return Tensor::empty({x.size(0), *row}, x.dtype(), x.device()).slice(1, 0, x.size(1));
}

std::optional<Tensor> sole_padded_rows(const Tensor& dy, int64_t width) {
  if (dy.rank() != 2 || dy.size(1) >= width || dy.offset() != 0 || dy.storage().use_count() != 1) return std::nullopt;
  if ((dy.size(0) > 1 && dy.strides()[0] != width) || (dy.size(1) > 1 && dy.strides()[1] != 1)) return std::nullopt;
  const uint64_t elements = dy.storage()->bytes() / dtype_size(dy.dtype());
  if (uint64_t(dy.size(0)) * uint64_t(width) > elements) return std::nullopt;
  return dy.as_strided({dy.size(0), width}, {width, 1}, 0);
}

}  // namespace kestrel::fn
