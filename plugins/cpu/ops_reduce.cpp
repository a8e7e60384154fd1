// Reductions over any set of axes: out has in's rank, with extent 1 on each reduced axis.
#include <limits>
#include <vector>

#include "kestrel/plugin_shapes.hpp"
#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// Splits the input's axes into kept ones (matching out) and reduced ones.
struct ReducePlan {
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_shape[KESTREL_MAX_RANK], kept_in_strides[KESTREL_MAX_RANK], kept_out_strides[KESTREL_MAX_RANK];
  int64_t reduced_shape[KESTREL_MAX_RANK], reduced_strides[KESTREL_MAX_RANK];
  int64_t reduced_count = 1;

  ReducePlan(const kestrel_tensor& in, const kestrel_tensor& out) {
    for (int d = 0; d < in.rank; ++d) {
      if (out.shape[d] == 1 && in.shape[d] != 1) {
        reduced_count *= in.shape[d];
        if (reduced_rank && reduced_strides[reduced_rank - 1] == in.strides[d] * in.shape[d]) {
          // walked as one axis with the previous reduced one: same elements, same order
          reduced_shape[reduced_rank - 1] *= in.shape[d];
          reduced_strides[reduced_rank - 1] = in.strides[d];
          continue;
        }
        reduced_shape[reduced_rank] = in.shape[d];
        reduced_strides[reduced_rank++] = in.strides[d];
      } else {
        kept_shape[kept_rank] = in.shape[d];
        kept_in_strides[kept_rank] = in.strides[d];
        kept_out_strides[kept_rank++] = out.strides[d];
      }
    }
  }
  // Offsets in `in` and `out` of the kept multi-index with linear index `linear`.
  void kept_offsets(int64_t linear, int64_t& in_offset, int64_t& out_offset) const {
    in_offset = out_offset = 0;
    for (int d = kept_rank - 1; d >= 0; --d) {
      int64_t idx = linear % kept_shape[d];
      linear /= kept_shape[d];
      in_offset += idx * kept_in_strides[d];
      out_offset += idx * kept_out_strides[d];
    }
  }
  // Visits the reduced elements of one output in row-major order, counting instead of dividing.
  template <class Visit>
  void walk_reduced(Visit visit) const {
    int64_t index[KESTREL_MAX_RANK] = {}, offset = 0;
    for (int64_t r = 0; r < reduced_count; ++r) {
      if (!visit(r, offset)) return;
      for (int d = reduced_rank - 1; d >= 0; --d) {
        offset += reduced_strides[d];
        if (++index[d] < reduced_shape[d]) break;
        offset -= reduced_strides[d] * reduced_shape[d];
        index[d] = 0;
      }
    }
  }
};

template <class A>
A magnitude(A v) { return v < A(0) ? -v : v; }  // a NaN stays NaN

// Max, min and MAX_ABS (ABI 1.11) fold the same way: NaN wins, and the order does not matter.
bool is_extreme(kestrel_reduce_fn fn) {
  return fn == KESTREL_REDUCE_MAX || fn == KESTREL_REDUCE_MIN || fn == KESTREL_REDUCE_MAX_ABS;
}
template <class A>
A fold_extreme(kestrel_reduce_fn fn, A acc, A v) {
  if (fn == KESTREL_REDUCE_MAX) return nan_max(acc, v);
  if (fn == KESTREL_REDUCE_MIN) return nan_min(acc, v);
  return nan_max(acc, magnitude(v));
}
template <class A>
A first_extreme(kestrel_reduce_fn fn, A v) { return fn == KESTREL_REDUCE_MAX_ABS ? magnitude(v) : v; }

// Max, min or MAX_ABS of x[0, n), NaN if any element is NaN. The NaN is noted beside the fold rather
// than by it, and `omp simd` (-fopenmp-simd) lets GCC fold in vector lanes, which it does not do for a
// float max on its own; max and min give the same result in any order.
template <kestrel_reduce_fn Fn, class E>
typename E::compute fold_piece(const typename E::storage* x, int64_t n) {
  using C = typename E::compute;
  C acc = first_extreme(Fn, C(E::load(x[0])));
  int nan = 0;
  if constexpr (Fn == KESTREL_REDUCE_MIN) {
#pragma omp simd reduction(min : acc) reduction(| : nan)
    for (int64_t i = 0; i < n; ++i) {
      const C v = E::load(x[i]);
      nan |= v != v;
      acc = v < acc ? v : acc;
    }
  } else {
#pragma omp simd reduction(max : acc) reduction(| : nan)
    for (int64_t i = 0; i < n; ++i) {
      const C v = Fn == KESTREL_REDUCE_MAX_ABS ? magnitude(C(E::load(x[i]))) : C(E::load(x[i]));
      nan |= v != v;
      acc = v > acc ? v : acc;
    }
  }
  return nan ? std::numeric_limits<C>::quiet_NaN() : acc;
}

// Max, min or MAX_ABS of one contiguous run x[0, count) into y: loss scaling's check of the flat gradients
// reads millions of elements for one output, so pieces of the run are folded on separate threads, then
// the pieces in order (exact in any order, so the result is the serial loop's).
template <kestrel_reduce_fn Fn, class E>
void fold_run(const typename E::storage* x, int64_t count, typename E::storage* y) {
  using C = typename E::compute;
  const int64_t pieces = (count + kGrain - 1) / kGrain;
  std::vector<C> folded(size_t(pieces), C(0));
  C* out = folded.data();
  parallel_for_split("kestrel::reduce_pieces", pieces, count, [=](int64_t p) {
    out[p] = fold_piece<Fn, E>(x + p * kGrain, std::min(kGrain, count - p * kGrain));
  });
  C acc = out[0];
  for (int64_t p = 1; p < pieces; ++p) acc = Fn == KESTREL_REDUCE_MIN ? nan_min(acc, out[p]) : nan_max(acc, out[p]);
  *y = E::store(acc);
}

// What an element adds to a sum: itself, or its square for SUM_SQUARES (ABI 1.17).
template <class A>
A term(bool squares, A v) { return squares ? v * v : v; }

// The sum of the squares of one contiguous run x[0, count) into y: gradient clipping's norm reads
// millions of elements for one output, so pieces of the run are summed on separate threads, each in eight
// interleaved partial sums in double, then the pieces in order: the bits do not depend on the thread count.
template <class E>
void sum_squares_run(const typename E::storage* x, int64_t count, typename E::storage* y) {
  using C = typename E::compute;
  const int64_t pieces = (count + kGrain - 1) / kGrain;
  std::vector<double> sums(size_t(pieces), 0.0);
  double* out = sums.data();
  parallel_for_split("kestrel::sum_squares_pieces", pieces, count, [=](int64_t p) {
    const typename E::storage* v = x + p * kGrain;
    const int64_t n = std::min(kGrain, count - p * kGrain);
    double part[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) part[k] += term(true, double(E::load(v[i + k])));
    for (; i < n; ++i) part[0] += term(true, double(E::load(v[i])));
    out[p] = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  });
  double total = 0;
  for (int64_t p = 0; p < pieces; ++p) total += out[p];
  *y = E::store(static_cast<C>(total));
}

// Rows a column sum adds on one thread before its partial sums join the others', in order.
constexpr int64_t kSumRows = 256;

template <class E>
void run_reduce(kestrel_reduce_fn fn, const kestrel_tensor& in, const kestrel_tensor& out) {
  using S = typename E::storage;
  using C = typename E::compute;
  // Floats accumulate in double: the CPU can afford the accuracy.
  using Acc = std::conditional_t<E::is_float, double, int64_t>;
  const ReducePlan plan(in, out);
  const S* x = static_cast<const S*>(in.buffer->data) + in.offset;
  const int64_t outputs = numel(out), count = plan.reduced_count;
  if (fn == KESTREL_REDUCE_ARGMAX) {
    int64_t* y = static_cast<int64_t*>(out.buffer->data) + out.offset;
    parallel_for_split("kestrel::argmax", outputs, outputs * count, [=](int64_t o) {
      int64_t base, out_at;
      plan.kept_offsets(o, base, out_at);
      C best = E::load(x[base]);
      int64_t best_index = 0;
      plan.walk_reduced([&](int64_t r, int64_t offset) {
        C v = E::load(x[base + offset]);
        if (v > best || v != v) {
          best = v;
          best_index = r;
        }
        return best == best;  // the first NaN wins, so stop there
      });
      y[out_at] = best_index;
    });
    return;
  }
  S* y = static_cast<S*>(out.buffer->data) + out.offset;
  const bool squares = fn == KESTREL_REDUCE_SUM_SQUARES;  // float dtypes only (reduce_fits)
  const bool sum = fn == KESTREL_REDUCE_SUM || fn == KESTREL_REDUCE_MEAN || squares;
  if (sum && plan.reduced_rank == 1 && plan.kept_rank == 1 && plan.kept_in_strides[0] == 1) {
    // Column sums of a row-major matrix (bias gradients): walking the input row by row reads it in order
    // and vectorises. Long sums go by blocks of kSumRows rows, each block's sums on one thread and the
    // blocks' added in order: threads read whole rows in order (threads walking blocks of columns down
    // every row were slower than one thread, cpu_parallel.hpp), and the blocks do not depend on the
    // thread count, so neither do the bits.
    const int64_t row_stride = plan.reduced_strides[0], out_stride = plan.kept_out_strides[0];
    const int64_t blocks = (count + kSumRows - 1) / kSumRows;
    std::vector<Acc> partial(size_t(blocks * outputs), Acc(0));  // (blocks, outputs)
    Acc* sums = partial.data();
    parallel_chunks("kestrel::column_sums", blocks, outputs * count, [=](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        Acc* a = sums + block * outputs;
        for (int64_t r = block * kSumRows; r < std::min(count, (block + 1) * kSumRows); ++r) {
          const S* row = x + r * row_stride;
          for (int64_t o = 0; o < outputs; ++o) a[o] += term(squares, Acc(E::load(row[o])));
        }
      }
    });
    for (int64_t o = 0; o < outputs; ++o) {
      Acc total = count ? sums[o] : Acc(0);
      for (int64_t block = 1; block < blocks; ++block) total += sums[block * outputs + o];
      if (fn == KESTREL_REDUCE_MEAN) total = count ? total / Acc(count) : Acc(std::numeric_limits<double>::quiet_NaN());
      y[o * out_stride] = E::store(static_cast<C>(total));
    }
    return;
  }
  if ((is_extreme(fn) || squares) && outputs == 1 && plan.reduced_rank == 1 && plan.reduced_strides[0] == 1 &&
      count > kGrain) {
    int64_t base, out_at;
    plan.kept_offsets(0, base, out_at);
    if constexpr (E::is_float)
      if (squares) return sum_squares_run<E>(x + base, count, y + out_at);
    if (fn == KESTREL_REDUCE_MAX) fold_run<KESTREL_REDUCE_MAX, E>(x + base, count, y + out_at);
    else if (fn == KESTREL_REDUCE_MIN) fold_run<KESTREL_REDUCE_MIN, E>(x + base, count, y + out_at);
    else fold_run<KESTREL_REDUCE_MAX_ABS, E>(x + base, count, y + out_at);
    return;
  }
  const int64_t run = plan.reduced_rank ? plan.reduced_shape[plan.reduced_rank - 1] : 0;
  if (sum && plan.reduced_rank >= 1 && plan.reduced_strides[plan.reduced_rank - 1] == 1 && run >= 64) {
    // Sums whose innermost reduced axis is contiguous, such as a convolution's bias gradient (over N and
    // H*W): each run is added in four interleaved partial sums (in double) and the runs in order.
    ReducePlan outer = plan;  // the reduced axes but the last: one visit per run
    outer.reduced_rank -= 1;
    outer.reduced_count = count / run;
    parallel_for_split("kestrel::reduce_runs", outputs, outputs * count, [=](int64_t o) {
      int64_t base, out_at;
      outer.kept_offsets(o, base, out_at);
      Acc acc = 0;
      outer.walk_reduced([&](int64_t, int64_t offset) {
        const S* v = x + base + offset;
        Acc part[4] = {0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 4 <= run; i += 4)
          for (int k = 0; k < 4; ++k) part[k] += term(squares, Acc(E::load(v[i + k])));
        for (; i < run; ++i) part[0] += term(squares, Acc(E::load(v[i])));
        acc += (part[0] + part[1]) + (part[2] + part[3]);
        return true;
      });
      if (fn == KESTREL_REDUCE_MEAN) acc = acc / Acc(count);
      y[out_at] = E::store(static_cast<C>(acc));
    });
    return;
  }
  parallel_for_split("kestrel::reduce", outputs, outputs * count, [=](int64_t o) {
    int64_t base, out_at;
    plan.kept_offsets(o, base, out_at);
    Acc acc = sum ? Acc(0) : first_extreme(fn, Acc(E::load(x[base])));
    plan.walk_reduced([&](int64_t, int64_t offset) {
      const Acc v = Acc(E::load(x[base + offset]));
      acc = sum ? acc + term(squares, v) : fold_extreme(fn, acc, v);
      return true;
    });
    if (fn == KESTREL_REDUCE_MEAN) acc = count ? acc / Acc(count) : Acc(std::numeric_limits<double>::quiet_NaN());
    y[out_at] = E::store(static_cast<C>(acc));
  });
}

}  // namespace

bool supports_reduce(const kestrel_op& op) { return kestrel::plugin_shapes::reduce_fits(op); }

void launch_reduce(const kestrel_op& op) {
  auto fn = params_of<kestrel_reduce_params>(op, "reduce").fn;
  if (numel(op.outputs[0]) == 0) return;
  dispatch(op.inputs[0].dtype, [&](auto elem) { run_reduce<decltype(elem)>(fn, op.inputs[0], op.outputs[0]); });
}

}  // namespace kestrel_cpu
