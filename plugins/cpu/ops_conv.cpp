// The fused convolution ops (plugin ABI 1.10): forward with its bias and ReLU, the input's gradient and
// the weight's (and bias's). The composed path writes the column matrix of the whole batch, (C*KH*KW,
// N*OH*OW), copies it into a GEMM's layout and the product back into (N, O, OH, OW): for the Fashion
// ConvNet's second layer at batch 512 that is 115 MB written and read twice a step, and those passes
// took about half the step (KESTREL_CPU_PROFILE=1). Here each image's columns are built a band of output
// rows at a time into a block that stays in cache, multiplied there, and the product lands in place.
// Images are spread over the threads, each product on one BLAS thread.
#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "cpu_columns.hpp"
#include "cpu_half_rows.hpp"
#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// A band's column block holds at most this many elements (1 MiB of f32), unless one output row alone
// needs more: it stays in a core's L2 cache while the product reads it.
constexpr int64_t kBandElements = int64_t(1) << 18;
// The weight gradient sums images in fixed groups of at least this many output pixels, each group into
// its own partial sum, and then the groups in order: the result does not depend on the thread count.
constexpr int64_t kGroupPixels = 4096;

struct Conv {
  Geometry g;
  int64_t out_channels, taps, spatial, band_rows;  // taps: C*KH*KW; spatial: OH*OW; band_rows: output rows a band
  bool direct;  // 1x1, stride 1, no padding: the image is its own column matrix
  bool relu;    // forward applies ReLU; backward reads y (in2) and masks dy with y > 0
};

Conv conv_of(const kestrel_op& op, const kestrel_tensor& x, const kestrel_tensor& weight) {
  const auto& p = params_of<kestrel_conv_params>(op, "conv2d");
  Conv c{kestrel::plugin_shapes::conv_geometry(p, x, weight), weight.shape[0], 0, 0, 0, false,
         p.activation == KESTREL_ACTIVATION_RELU};
  c.taps = c.g.c * c.g.kh * c.g.kw;
  c.spatial = c.g.oh * c.g.ow;
  c.band_rows = std::clamp<int64_t>(kBandElements / std::max<int64_t>(c.taps * c.g.ow, 1), 1, c.g.oh);
  c.direct = c.g.kh == 1 && c.g.kw == 1 && c.g.sh == 1 && c.g.sw == 1 && c.g.ph == 0 && c.g.pw == 0;
  return c;
}

// Column blocks for the pieces of one loop that run at once, each taken for a piece's duration: at most
// host_threads() pieces of a loop run at once (cpu_parallel.hpp). Allocated before the loop, where a
// failure reaches the caller.
template <class T>
class ColumnBlocks {
 public:
  explicit ColumnBlocks(int64_t elements)
      : elements_(elements), data_(size_t(host_threads() * elements)), busy_(new std::atomic<bool>[host_threads()]()) {}
  T* take() {
    for (;;)
      for (int i = 0; i < host_threads(); ++i)
        if (!busy_[i].exchange(true, std::memory_order_acquire)) return data_.data() + i * elements_;
  }
  void give_back(T* block) { busy_[(block - data_.data()) / elements_].store(false, std::memory_order_release); }

 private:
  int64_t elements_;
  std::vector<T> data_;
  std::unique_ptr<std::atomic<bool>[]> busy_;
};

// The columns of output rows [oy0, oy1) of image n ((taps, band pixels), row-major), built in `block`,
// or, for a direct convolution, the image itself (row stride spatial).
template <class T>
MatrixBlock<T> band_columns(const Conv& c, const T* x, int64_t n, int64_t oy0, int64_t oy1, T* block) {
  const T* image = x + n * c.g.c * c.g.h * c.g.w;
  if (c.direct) return {image + oy0 * c.g.ow, c.spatial};
  const int64_t pixels = (oy1 - oy0) * c.g.ow, strides[3] = {c.g.h * c.g.w, c.g.w, 1};
  for (int64_t r = 0; r < c.taps; ++r) columns_row(c.g, image, strides, r, oy0, oy1, block + r * pixels, T(0));
  return {block, pixels};
}

// Calls band(oy0, oy1) for every band of output rows, in order.
template <class Band>
void for_bands(const Conv& c, const Band& band) {
  for (int64_t oy0 = 0; oy0 < c.g.oh; oy0 += c.band_rows) band(oy0, std::min(c.g.oh, oy0 + c.band_rows));
}

// A piece's scratch: a band's columns (none for a direct convolution), and for backward with ReLU its
// masked output gradient after them.
int64_t column_elements(const Conv& c) { return c.direct ? 1 : c.taps * c.band_rows * c.g.ow; }
int64_t mask_elements(const Conv& c) { return c.relu ? c.out_channels * c.band_rows * c.g.ow : 0; }

// The output gradient of image n's band [first, first + pixels) as the products read it: dy itself
// (row stride spatial), or with ReLU, dy where y > 0 and 0 elsewhere, written into `masked`.
template <class T>
MatrixBlock<T> band_gradient(const Conv& c, const T* dy, const T* y, int64_t n, int64_t first, int64_t pixels,
                             T* masked) {
  const int64_t image = n * c.out_channels * c.spatial + first;
  if (!c.relu) return {dy + image, c.spatial};
  for (int64_t o = 0; o < c.out_channels; ++o) {
    const T* __restrict grad = dy + image + o * c.spatial;
    const T* __restrict out = y + image + o * c.spatial;
    T* __restrict to = masked + o * pixels;
    for (int64_t i = 0; i < pixels; ++i) {
      const T g = grad[i];  // read unconditionally, so the select vectorises (a branch mispredicts half the time)
      to[i] = out[i] > T(0) ? g : T(0);
    }
  }
  return {masked, pixels};
}

// y (N, O, OH, OW) = act(weight (O, taps) @ columns + bias), image by image.
template <class T>
void forward(const kestrel_op& op) {
  const Conv c = conv_of(op, op.inputs[0], op.inputs[1]);
  const T *x = data_of<T>(op.inputs[0]), *w = data_of<T>(op.inputs[1]);
  const T* bias = op.num_inputs == 3 ? data_of<T>(op.inputs[2]) : nullptr;
  T* y = mutable_data_of<T>(op.outputs[0]);
  ColumnBlocks<T> blocks(column_elements(c));
  const auto turn = blas_turn(/*one_thread_each=*/true);
  const int64_t work = c.g.n * c.spatial * (c.taps + c.out_channels);
  parallel_chunks("kestrel::conv2d", c.g.n, work, [&](int64_t begin, int64_t end) {
    T* block = blocks.take();
    for (int64_t n = begin; n < end; ++n) {
      T* out = y + n * c.out_channels * c.spatial;
      for_bands(c, [&](int64_t oy0, int64_t oy1) {
        const int64_t first = oy0 * c.g.ow, pixels = (oy1 - oy0) * c.g.ow;
        if (bias)  // the product adds onto the bias (beta = 1), as the linear op does
          for (int64_t o = 0; o < c.out_channels; ++o) std::fill_n(out + o * c.spatial + first, pixels, bias[o]);
        gemm_block<T>({w, c.taps}, band_columns(c, x, n, oy0, oy1, block), c.out_channels, pixels, c.taps, T(1),
                      T(bias ? 1 : 0), out + first, c.spatial);
        if (c.relu)
          for (int64_t o = 0; o < c.out_channels; ++o) {
            T* row = out + o * c.spatial + first;
            for (int64_t i = 0; i < pixels; ++i) row[i] = row[i] < T(0) ? T(0) : row[i];
          }
      });
    }
    blocks.give_back(block);
  });
}

// Adds row r of a band's column gradients (output rows [oy0, oy1)) onto the input pixels they were read
// from, in image (C, H, W).
template <class T>
void add_columns_row(const Geometry& g, const T* src, int64_t r, int64_t oy0, int64_t oy1, T* image) {
  const int64_t ch = r / (g.kh * g.kw);
  const int ky = int((r / g.kw) % g.kh), kx = int(r % g.kw);
  const Span across = inside(g.ow, g.sw, g.w_at(0, kx), g.w);
  const Span down = inside(g.oh, g.sh, g.h_at(0, ky), g.h);
  T* plane = image + ch * g.h * g.w;
  for (int64_t oy = std::max(oy0, down.lo); oy < std::min(oy1, down.hi); ++oy) {
    T* __restrict row = plane + g.h_at(oy, ky) * g.w;
    const T* __restrict from = src + (oy - oy0) * g.ow;
    if (g.sw == 1 && g.dw == 1) {  // consecutive outputs read consecutive pixels: one vector loop
      T* __restrict to = row + g.w_at(0, kx);
      for (int64_t ox = across.lo; ox < across.hi; ++ox) to[ox] += from[ox];
    } else {
      for (int64_t ox = across.lo; ox < across.hi; ++ox) row[g.w_at(ox, kx)] += from[ox];
    }
  }
}

// dx (N, C, H, W): each band's column gradients weight^T (taps, O) @ dy, added back onto the image in
// band order and, within a band, tap by tap (for a direct convolution, the band of dx itself).
template <class T>
void backward_data(const kestrel_op& op) {
  const Conv c = conv_of(op, op.outputs[0], op.inputs[1]);
  const T *dy = data_of<T>(op.inputs[0]), *w = data_of<T>(op.inputs[1]);
  const T* y = c.relu ? data_of<T>(op.inputs[2]) : nullptr;
  T* dx = mutable_data_of<T>(op.outputs[0]);
  ColumnBlocks<T> blocks(column_elements(c) + mask_elements(c));
  const auto turn = blas_turn(/*one_thread_each=*/true);
  const int64_t image = c.g.c * c.g.h * c.g.w;
  const int64_t work = c.g.n * (c.spatial * (c.taps + c.out_channels) + image);
  parallel_chunks("kestrel::conv2d_backward_data", c.g.n, work, [&](int64_t begin, int64_t end) {
    T* block = blocks.take();
    T* masked = block + column_elements(c);
    for (int64_t n = begin; n < end; ++n) {
      T* dx_n = dx + n * image;
      if (!c.direct) std::fill_n(dx_n, image, T(0));
      for_bands(c, [&](int64_t oy0, int64_t oy1) {
        const int64_t first = oy0 * c.g.ow, pixels = (oy1 - oy0) * c.g.ow;
        const MatrixBlock<T> grad = band_gradient(c, dy, y, n, first, pixels, masked);
        T* columns = c.direct ? dx_n + first : block;  // (taps, pixels), row stride ld
        const int64_t ld = c.direct ? c.spatial : pixels;
        gemm_block<T>({w, c.taps, true}, grad, c.taps, pixels, c.out_channels, T(1), T(0), columns, ld);
        if (!c.direct)
          for (int64_t r = 0; r < c.taps; ++r) add_columns_row(c.g, block + r * pixels, r, oy0, oy1, dx_n);
      });
    }
    blocks.give_back(block);
  });
}

// dweight (O, taps) = sum over images of dy_n (O, OH*OW) @ columns_n^T, and dbias (O) = dy's sums: each
// group of images into a partial sum, then the partials added in group order.
template <class T>
void backward_filter(const kestrel_op& op) {
  const Conv c = conv_of(op, op.inputs[1], op.outputs[0]);
  const T *dy = data_of<T>(op.inputs[0]), *x = data_of<T>(op.inputs[1]);
  const T* y = c.relu ? data_of<T>(op.inputs[2]) : nullptr;
  T* dw = mutable_data_of<T>(op.outputs[0]);
  T* db = op.num_outputs == 2 ? mutable_data_of<T>(op.outputs[1]) : nullptr;
  const int64_t per_group = std::max<int64_t>(1, kGroupPixels / std::max<int64_t>(c.spatial, 1));
  const int64_t groups = (c.g.n + per_group - 1) / per_group, weights = c.out_channels * c.taps;
  // Each group's weight gradient, then its bias gradient: (groups, O * taps + O).
  std::vector<T> partials(size_t(groups * (weights + c.out_channels)), T(0));
  T* partial = partials.data();
  ColumnBlocks<T> blocks(column_elements(c) + mask_elements(c));
  const auto turn = blas_turn(/*one_thread_each=*/true);
  const int64_t work = c.g.n * c.spatial * (c.taps + c.out_channels);
  parallel_chunks("kestrel::conv2d_backward_filter", groups, work, [&](int64_t begin, int64_t end) {
    T* block = blocks.take();
    T* masked = block + column_elements(c);
    for (int64_t group = begin; group < end; ++group) {
      T* dw_group = partial + group * (weights + c.out_channels);
      T* db_group = dw_group + weights;
      for (int64_t n = group * per_group; n < std::min(c.g.n, (group + 1) * per_group); ++n) {
        for_bands(c, [&](int64_t oy0, int64_t oy1) {
          const int64_t first = oy0 * c.g.ow, pixels = (oy1 - oy0) * c.g.ow;
          const MatrixBlock<T> grad = band_gradient(c, dy, y, n, first, pixels, masked);  // (O, pixels)
          MatrixBlock<T> columns = band_columns(c, x, n, oy0, oy1, block);                // (taps, pixels)
          columns.transposed = true;                                                       // read as (pixels, taps)
          gemm_block<T>(grad, columns, c.out_channels, c.taps, pixels, T(1), T(1), dw_group, c.taps);
          if (db)
            for (int64_t o = 0; o < c.out_channels; ++o) {
              const T* row = grad.data + o * grad.ld;
              T sum = 0;
              for (int64_t i = 0; i < pixels; ++i) sum += row[i];
              db_group[o] += sum;
            }
        });
      }
    }
    blocks.give_back(block);
  });
  const int64_t outputs = weights + (db ? c.out_channels : 0);
  parallel_for_split("kestrel::conv2d_filter_sum", outputs, outputs * groups, [=](int64_t i) {
    T sum = 0;
    for (int64_t group = 0; group < groups; ++group) sum += partial[group * (weights + c.out_channels) + i];
    if (i < weights)
      dw[i] = sum;
    else
      db[i - weights] = sum;
  });
}

template <class T>
void run_conv(const kestrel_op& op) {
  switch (op.kind) {
    case KESTREL_OP_CONV2D: return forward<T>(op);
    case KESTREL_OP_CONV2D_BACKWARD_DATA: return backward_data<T>(op);
    default: return backward_filter<T>(op);
  }
}

// A 16-bit convolution (mixed precision) runs the f32 kernels on f32 copies of its tensors, as cuDNN
// computes 16-bit convolutions in f32, and rounds each output once. The composed path instead built the
// batch's column matrix in 16 bits and widened it for every product: about 10x the f32 step on the
// Fashion ConvNet. The images go through in chunks, so the copies (host memory the device statistics and
// the planner do not see) stay within kChunkFloats whatever the batch; the weight and bias are widened
// once. The weight gradient's chunks are added in double, in chunk order, before it is rounded.
constexpr int64_t kChunkFloats = int64_t(1) << 23;  // 32 MiB of f32 copies

template <class E>
class Widened {
 public:
  using S = typename E::storage;
  // An f32 copy of t's images [n0, n0 + count) (all of t when it is no batch tensor); filled from t when
  // `read`. The descriptor `as` describes the copy.
  void hold(const kestrel_tensor& t, bool batch, int64_t n0, int64_t count, bool read, kestrel_tensor& as) {
    const int64_t per_image = batch ? numel(t) / t.shape[0] : numel(t), first = batch ? n0 * per_image : 0;
    const int64_t n = batch ? count * per_image : per_image;
    copies_.emplace_back(size_t(std::max<int64_t>(n, 1)));
    buffers_.push_back(std::make_unique<kestrel_buffer>(kestrel_buffer{nullptr, copies_.back().data(), 0}));
    if (read) {
      const S* from = data_of<S>(t) + first;
      float* to = copies_.back().data();
      parallel_chunks("kestrel::conv2d_widen", n, n,
                      [=](int64_t begin, int64_t end) { widen_row<E>(from + begin, to + begin, end - begin); });
    }
    as = t;
    as.buffer = buffers_.back().get();
    as.offset = 0;
    as.dtype = KESTREL_DTYPE_F32;
    if (batch) as.shape[0] = count;
  }
  const float* last() const { return copies_.back().data(); }

 private:
  std::deque<std::vector<float>> copies_;  // a deque: holding more leaves the earlier copies where they are
  std::vector<std::unique_ptr<kestrel_buffer>> buffers_;
};

template <class E>
void run_widened(const kestrel_op& op) {
  using S = typename E::storage;
  const bool filter = op.kind == KESTREL_OP_CONV2D_BACKWARD_FILTER;
  // Every rank-4 tensor but the weight holds images: the weight is in1, or the filter gradient's out0
  // (whose in1 is x).
  auto is_batch = [&](const kestrel_tensor& t, bool weight) { return t.rank == 4 && !weight; };
  const kestrel_tensor& images = filter ? op.inputs[1] : op.kind == KESTREL_OP_CONV2D ? op.inputs[0] : op.outputs[0];
  const int64_t batch = images.shape[0];
  int64_t per_image = 0;
  auto weight_input = [&](int i) { return !filter && i == 1; };
  for (int i = 0; i < op.num_inputs; ++i)
    if (is_batch(op.inputs[i], weight_input(i))) per_image += numel(op.inputs[i]) / std::max<int64_t>(batch, 1);
  for (int o = 0; o < op.num_outputs; ++o)
    if (is_batch(op.outputs[o], filter && o == 0)) per_image += numel(op.outputs[o]) / std::max<int64_t>(batch, 1);
  const int64_t chunk = std::max<int64_t>(1, kChunkFloats / std::max<int64_t>(per_image, 1));
  Widened<E> fixed;  // the weight and bias, once
  kestrel_op wide = op;
  for (int i = 0; i < op.num_inputs; ++i)
    if (!is_batch(op.inputs[i], weight_input(i))) fixed.hold(op.inputs[i], false, 0, 0, true, wide.inputs[i]);
  std::vector<std::vector<double>> sums;  // the filter gradient's outputs over the chunks so far
  for (int64_t n0 = 0; n0 < std::max<int64_t>(batch, 1); n0 += chunk) {
    const int64_t count = std::min(chunk, batch - n0);
    Widened<E> part;
    for (int i = 0; i < op.num_inputs; ++i)
      if (is_batch(op.inputs[i], weight_input(i))) part.hold(op.inputs[i], true, n0, count, true, wide.inputs[i]);
    std::vector<const float*> results;
    for (int o = 0; o < op.num_outputs; ++o) {
      part.hold(op.outputs[o], is_batch(op.outputs[o], filter && o == 0), n0, count, false, wide.outputs[o]);
      results.push_back(part.last());
    }
    run_conv<float>(wide);
    for (int o = 0; o < op.num_outputs; ++o) {
      const kestrel_tensor& out = op.outputs[o];
      if (filter) {  // added up over the chunks in order, in double, then rounded once below
        const int64_t n = numel(out);
        if (sums.size() < size_t(op.num_outputs)) sums.emplace_back(size_t(n), 0.0);
        for (int64_t e = 0; e < n; ++e) sums[size_t(o)][size_t(e)] += results[size_t(o)][e];
        continue;
      }
      const int64_t n = numel(out) / std::max<int64_t>(batch, 1) * count;
      const float* from = results[size_t(o)];
      S* to = mutable_data_of<S>(out) + n0 * (numel(out) / std::max<int64_t>(batch, 1));
      parallel_chunks("kestrel::conv2d_round", n, n,
                      [=](int64_t begin, int64_t end) { round_row<E>(from + begin, to + begin, end - begin); });
    }
    if (batch == 0) break;
  }
  for (size_t o = 0; o < sums.size(); ++o) {
    S* to = mutable_data_of<S>(op.outputs[o]);
    for (size_t e = 0; e < sums[o].size(); ++e) to[e] = E::store(float(sums[o][e]));
  }
}

}  // namespace

bool supports_conv(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::conv_fits(op) || !kestrel::plugin_shapes::all_contiguous(op)) return false;
  // BLAS takes no empty operand: no channels in or out is left to the composed path.
  const kestrel_tensor& weight = op.kind == KESTREL_OP_CONV2D_BACKWARD_FILTER ? op.outputs[0] : op.inputs[1];
  if (weight.shape[0] == 0 || weight.shape[1] == 0) return false;
  return is_float_dtype(op.outputs[0].dtype);
}

void launch_conv(const kestrel_op& op) {
  switch (op.outputs[0].dtype) {
    case KESTREL_DTYPE_F32: return run_conv<float>(op);
    case KESTREL_DTYPE_F64: return run_conv<double>(op);
    case KESTREL_DTYPE_F16: return run_widened<F16>(op);
    default: return run_widened<BF16>(op);
  }
}

}  // namespace kestrel_cpu
