// gather and scatter_add along one axis (torch.gather / Tensor.scatter_add_ semantics).
#include <string>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

template <class I>
int64_t index_at(const View<I>& index, int64_t linear) {
  return static_cast<int64_t>(index.base[index.at(linear)]);
}

// Rejects out-of-range indices before any write, so a bad label never corrupts memory.
template <class I>
void check_indices(const View<I>& index, int64_t extent, const char* what) {
  for (int64_t i = 0; i < index.numel; ++i) {
    int64_t v = index_at(index, i);
    if (v < 0 || v >= extent)
      fail(std::string(what) + ": index " + std::to_string(v) + " is out of range for an axis of size " +
           std::to_string(extent));
  }
}

// Offset in `target` of the element at the index tensor's position `linear`, with the axis coordinate
// replaced by the index value.
template <class I>
int64_t target_offset(const View<I>& index, const kestrel_tensor& target, int axis, int64_t linear) {
  int64_t off = 0, rest = linear;
  int64_t value = index_at(index, linear);
  for (int d = index.rank - 1; d >= 0; --d) {
    int64_t coordinate = rest % index.shape[d];
    rest /= index.shape[d];
    off += (d == axis ? value : coordinate) * target.strides[d];
  }
  return off;
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
  const kestrel_tensor &data = op.inputs[0], &index_desc = op.inputs[1], &out = op.outputs[0];
  dispatch_index(index_desc.dtype, [&](auto index_type) {
    using I = decltype(index_type);
    View<I> index = view_of<I>(index_desc);
    check_indices(index, data.shape[axis], "gather");
    dispatch(data.dtype, [&](auto elem) {
      using S = typename decltype(elem)::storage;
      const S* x = static_cast<const S*>(data.buffer->data) + data.offset;
      View<S> y = view_of<S>(out);
      parallel_for_split("kestrel::gather", y.numel, y.numel,
                           [=](int64_t i) { y.base[y.at(i)] = x[target_offset(index, data, axis, i)]; });
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
  const kestrel_tensor &src_desc = op.inputs[0], &index_desc = op.inputs[1], &out = op.outputs[0];
  dispatch_index(index_desc.dtype, [&](auto index_type) {
    using I = decltype(index_type);
    View<I> index = view_of<I>(index_desc);
    check_indices(index, out.shape[axis], "scatter_add");
    dispatch(out.dtype, [&](auto elem) {
      using S = typename decltype(elem)::storage;
      if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double> || std::is_same_v<S, int32_t> ||
                    std::is_same_v<S, int64_t>) {
        View<S> src = view_of<S>(src_desc);
        S* y = static_cast<S*>(out.buffer->data) + out.offset;
        // In order on one thread: indices may repeat, and a sum's bits must not depend on threads.
        for (int64_t i = 0; i < src.numel; ++i) y[target_offset(index, out, axis, i)] += src.base[src.at(i)];
      }
    });
  });
}

}  // namespace kestrel_cpu
