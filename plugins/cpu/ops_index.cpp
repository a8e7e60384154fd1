// gather and scatter_add along one axis (torch.gather / Tensor.scatter_add_ semantics).
//
// Both walk the index a row of its last axis at a time: a row's first offsets come from its coordinates
// once, and along the row every tensor advances by its last stride, with no division per element. An
// embedding's index repeats each token id along a row (stride 0), so its rows are whole table rows.
#include <algorithm>
#include <string>
#include <vector>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// The rows of the last axis of `index`, of `other` (index's shape: gather's out, scatter's src) and of
// `target` (the tensor indexed along `axis`), and where each row starts.
template <class I>
struct IndexRows {
  const I* index_base;
  const kestrel_tensor &index, &other, &target;
  int axis, last;
  int64_t rows, length;  // how many rows, and their length

  IndexRows(const I* base, const kestrel_tensor& idx, const kestrel_tensor& oth, const kestrel_tensor& tgt, int ax)
      : index_base(base), index(idx), other(oth), target(tgt), axis(ax), last(idx.rank - 1) {
    length = idx.shape[last];
    rows = length == 0 ? 0 : numel(idx) / length;
  }

  struct Start {
    int64_t index, other, target;  // target's offset without the axis coordinate
  };
  Start start(int64_t row) const {
    Start s{0, 0, 0};
    for (int d = last - 1; d >= 0; --d) {
      const int64_t c = row % index.shape[d];
      row /= index.shape[d];
      s.index += c * index.strides[d];
      s.other += c * other.strides[d];
      if (d != axis) s.target += c * target.strides[d];
    }
    return s;
  }
  int64_t value(const Start& s, int64_t j) const { return int64_t(index_base[s.index + j * index.strides[last]]); }
  // The target's offset of the element at column j whose index value is v.
  int64_t target_at(const Start& s, int64_t j, int64_t v) const {
    return s.target + v * target.strides[axis] + (axis == last ? 0 : j * target.strides[last]);
  }
  int64_t other_at(const Start& s, int64_t j) const { return s.other + j * other.strides[last]; }
  // Whether each row holds one index value and reads or writes a row of the target (an embedding's rows):
  // then row r pairs other's row at start(r).other with the target's at target_at(start(r), 0, value).
  bool whole_rows() const { return index.strides[last] == 0 && axis != last; }
};

// y[j * y_stride] = x[j * x_stride] for j < n, or += (scatter); the unit-stride case apart so that it
// vectorises.
template <bool add, class S>
void row_op(S* y, int64_t y_stride, const S* x, int64_t x_stride, int64_t n) {
  auto apply = [](S& to, S from) {
    if constexpr (add)
      to += from;
    else
      to = from;
  };
  if (y_stride == 1 && x_stride == 1)
    for (int64_t j = 0; j < n; ++j) apply(y[j], x[j]);
  else
    for (int64_t j = 0; j < n; ++j) apply(y[j * y_stride], x[j * x_stride]);
}

// Rejects out-of-range indices before any write, so a bad label never corrupts memory. A row of one
// repeated value (stride 0) is checked once.
template <class I>
void check_indices(const IndexRows<I>& walk, const char* what) {
  const int64_t extent = walk.target.shape[walk.axis];
  const int64_t distinct = walk.index.strides[walk.last] == 0 ? std::min<int64_t>(walk.length, 1) : walk.length;
  for (int64_t r = 0; r < walk.rows; ++r) {
    const auto s = walk.start(r);
    for (int64_t j = 0; j < distinct; ++j) {
      const int64_t v = walk.value(s, j);
      if (v < 0 || v >= extent)
        fail(std::string(what) + ": index " + std::to_string(v) + " is out of range for an axis of size " +
             std::to_string(extent));
    }
  }
}

// Whether two coordinates of `t` may name one element: a zero stride on an axis longer than 1.
bool overlaps(const kestrel_tensor& t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.strides[d] == 0 && t.shape[d] > 1) return true;
  return false;
}

template <class Fn>
void dispatch_index(kestrel_dtype dtype, Fn&& fn) {
  if (dtype == KESTREL_DTYPE_I64)
    fn(int64_t{});
  else
    fn(int32_t{});
}

}  // namespace

// in0 data, in1 index -> out (index's shape): out[.., i, ..] = data[.., index[.., i, ..], ..]
bool supports_gather(const kestrel_op& op) { return kestrel::plugin_shapes::gather_fits(op); }

void launch_gather(const kestrel_op& op) {
  const int axis = params_of<kestrel_index_params>(op, "gather").axis;
  const kestrel_tensor &data = op.inputs[0], &index = op.inputs[1], &out = op.outputs[0];
  dispatch_index(index.dtype, [&](auto index_type) {
    using I = decltype(index_type);
    const IndexRows<I> walk(static_cast<const I*>(index.buffer->data) + index.offset, index, out, data, axis);
    check_indices(walk, "gather");
    dispatch(data.dtype, [&](auto elem) {
      using S = typename decltype(elem)::storage;
      const S* x = static_cast<const S*>(data.buffer->data) + data.offset;
      S* y = static_cast<S*>(out.buffer->data) + out.offset;
      const bool whole_rows = walk.whole_rows();
      parallel_chunks("kestrel::gather", walk.rows, numel(out), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const auto s = walk.start(r);
          if (whole_rows) {
            row_op<false>(y + s.other, out.strides[walk.last], x + walk.target_at(s, 0, walk.value(s, 0)),
                          data.strides[walk.last], walk.length);
            continue;
          }
          for (int64_t j = 0; j < walk.length; ++j) y[walk.other_at(s, j)] = x[walk.target_at(s, j, walk.value(s, j))];
        }
      });
    });
  });
}

// in0 src, in1 index (same shape) -> out updated in place: out[.., index[.., i, ..], ..] += src[.., i, ..]
bool supports_scatter_add(const kestrel_op& op) {
  // Sums in the storage type, which 16-bit floats would round at every step: those are left to the engine.
  const kestrel_dtype d = op.outputs[0].dtype;
  const bool summable = d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F64 || d == KESTREL_DTYPE_I32 || d == KESTREL_DTYPE_I64;
  return kestrel::plugin_shapes::scatter_add_fits(op) && summable;
}

void launch_scatter_add(const kestrel_op& op) {
  const int axis = params_of<kestrel_index_params>(op, "scatter_add").axis;
  const kestrel_tensor &src = op.inputs[0], &index = op.inputs[1], &out = op.outputs[0];
  dispatch_index(index.dtype, [&](auto index_type) {
    using I = decltype(index_type);
    const IndexRows<I> walk(static_cast<const I*>(index.buffer->data) + index.offset, index, src, out, axis);
    check_indices(walk, "scatter_add");
    dispatch(out.dtype, [&](auto elem) {
      using S = typename decltype(elem)::storage;
      if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double> || std::is_same_v<S, int32_t> ||
                    std::is_same_v<S, int64_t>) {
        const S* x = static_cast<const S*>(src.buffer->data) + src.offset;
        S* y = static_cast<S*>(out.buffer->data) + out.offset;
        // Indices may repeat, and a sum's bits must not depend on threads, so every target element is
        // added to by one thread, in row order. Along the axis indices repeat; across the others they
        // cannot: split the last axis when it is not the indexed one, else the rows (whose other
        // coordinates then all differ).
        const bool whole_rows = walk.whole_rows();
        auto add_rows = [&](int64_t row_begin, int64_t row_end, int64_t column_begin, int64_t column_end) {
          for (int64_t r = row_begin; r < row_end; ++r) {
            const auto s = walk.start(r);
            if (whole_rows) {
              row_op<true>(y + walk.target_at(s, column_begin, walk.value(s, 0)), out.strides[walk.last],
                           x + walk.other_at(s, column_begin), src.strides[walk.last], column_end - column_begin);
              continue;
            }
            for (int64_t j = column_begin; j < column_end; ++j) y[walk.target_at(s, j, walk.value(s, j))] += x[walk.other_at(s, j)];
          }
        };
        if (overlaps(out)) {  // elements shared between coordinates (a broadcast view): one thread, in order
          add_rows(0, walk.rows, 0, walk.length);
        } else if (whole_rows) {
          // An embedding's gradient: threads own ranges of index values, so each reads whole source rows
          // in order and adds those whose value is its own. Split by columns instead, every thread
          // walked all the rows a part at a time, and two threads took longer than one.
          thread_local std::vector<int64_t> values;
          values.resize(size_t(walk.rows));
          for (int64_t r = 0; r < walk.rows; ++r) values[size_t(r)] = walk.value(walk.start(r), 0);
          const int64_t* value = values.data();
          parallel_chunks("kestrel::scatter_add", out.shape[axis], numel(src), [&](int64_t first, int64_t end) {
            for (int64_t r = 0; r < walk.rows; ++r)
              if (value[r] >= first && value[r] < end) add_rows(r, r + 1, 0, walk.length);
          });
        } else if (axis == walk.last)
          parallel_chunks("kestrel::scatter_add", walk.rows, numel(src),
                          [&](int64_t begin, int64_t end) { add_rows(begin, end, 0, walk.length); });
        else
          parallel_chunks("kestrel::scatter_add", walk.length, numel(src),
                          [&](int64_t begin, int64_t end) { add_rows(0, walk.rows, begin, end); });
      }
    });
  });
}

}  // namespace kestrel_cpu
