// Optional fused ops: softmax, softmax + cross-entropy, and the Adam/AdamW/SGD parameter updates.
// Each is what the engine would otherwise compose from several primitive launches.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace kestrel_cpu {

namespace {

// Below this shift exp() adds nothing a double sum of at least 1 can hold and gives an output that rounds
// to 0 in f32 and 16-bit storage (and to within 1e-307 of it in f64). Shifts are clamped to it before exp:
// a causal mask's large negative scores, half of every row, would otherwise take the vector exp's slow
// path for underflow (a scalar call per lane). exp(-708) is still a normal double.
template <class S>
constexpr double kNegligibleShift = std::is_same_v<S, double> ? -708.0 : -105.0;

// exp(x[j] - shift) for one row into exps, in A, the differences clamped to kNegligibleShift. Inlined into
// the vector-width clones below.
template <class E, class A>
[[gnu::always_inline]] inline void exps_below(const typename E::storage* x, int64_t cols, A shift, A* exps) {
  constexpr A negligible = A(kNegligibleShift<typename E::storage>);
  map_staged<A>(0, cols, [=](int64_t j) { return std::max(A(E::load(x[j])) - shift, negligible); },
                [=](int64_t j, A e) { exps[j] = e; }, [](A d) { return std::exp(d); });
}

// exp(x[j] - top) for one row into exps, in A (double, or the accumulation type), each computed once for
// the sum and the outputs; returns top, the row's maximum (NaN if any element is).
template <class E, class A = double>
[[gnu::always_inline]] inline A shifted_exps(const typename E::storage* x, int64_t cols, A* exps) {
  A top = A(E::load(x[0]));
  for (int64_t j = 1; j < cols; ++j) top = nan_max(top, A(E::load(x[j])));
  exps_below<E>(x, cols, top, exps);
  return top;
}

// One row of softmax (or log-softmax), built per vector width; exps: cols scratch.
template <class E, class S = typename E::storage>
KESTREL_VECTOR_CLONES void softmax_row(const S* x, S* y, int64_t cols, bool log, double* exps) {
  const double top = shifted_exps<E>(x, cols, exps);
  double sum = 0;
  for (int64_t j = 0; j < cols; ++j) sum += exps[j];
  const double log_sum = std::log(sum);
  for (int64_t j = 0; j < cols; ++j)
    y[j] = E::store(typename E::compute(log ? double(E::load(x[j])) - top - log_sum : exps[j] / sum));
}

// One row's loss, in L (the logits' element type, or F32 beside 16-bit logits), and gradient, softmax -
// onehot, if grad is given; built per vector width.
template <class E, class L, class S = typename E::storage>
KESTREL_VECTOR_CLONES void cross_entropy_row(const S* x, int64_t cols, int64_t label, typename L::storage* loss,
                                             S* grad, double* exps) {
  using C = typename E::compute;
  const double top = shifted_exps<E>(x, cols, exps);
  double sum = 0;
  for (int64_t j = 0; j < cols; ++j) sum += exps[j];
  // x[label] - top first: with a huge maximum, log(sum) + top would absorb log(sum) (as CUDA's kernel orders it).
  *loss = L::store(typename L::compute(std::log(sum) - (double(E::load(x[label])) - top)));
  if (grad)
    for (int64_t j = 0; j < cols; ++j) grad[j] = E::store(C(exps[j] / sum - (j == label ? 1.0 : 0.0)));
}

// One row's gradient from its logits, (softmax - onehot) * scale, built per vector width. In the
// accumulation type (f32 but for f64 logits), not forward's double: recomputing every exp is this op's
// cost, and its result is rounded to the logits' dtype (f32 at most) anyway. exps: cols scratch.
// With forward's loss (ABI 1.14; a label in [0, cols), a loss within kCrossEntropyLossShortcut), the row's
// log-sum-exp is loss + x[label], and the exps are taken from it: no pass for the maximum and none for the
// sum.
template <class E, class S = typename E::storage, class A = Acc<E>>
KESTREL_VECTOR_CLONES void cross_entropy_grad_row(const S* x, int64_t cols, int64_t label, A scale, const A* loss,
                                                  S* grad, A* exps) {
  using C = typename E::compute;
  A sum = 1;
  if (loss) {
    exps_below<E>(x, cols, *loss + A(E::load(x[label])), exps);  // the log-sum-exp
  } else {
    shifted_exps<E, A>(x, cols, exps);
    sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += exps[j];
  }
  const A weight = scale / sum;
  for (int64_t j = 0; j < cols; ++j) grad[j] = E::store(C(exps[j] * weight - (j == label ? scale : A(0))));
}

// Row r's label as int64, whatever the labels' storage.
int64_t label_at(const kestrel_tensor& labels, int64_t r) {
  return labels.dtype == KESTREL_DTYPE_I64 ? static_cast<const int64_t*>(labels.buffer->data)[labels.offset + r]
                                           : static_cast<const int32_t*>(labels.buffer->data)[labels.offset + r];
}

// A row's thread-local scratch of doubles (or floats).
template <class A = double>
A* row_scratch(int64_t cols) {
  thread_local std::vector<A> scratch;
  scratch.resize(size_t(cols));
  return scratch.data();
}

}  // namespace

// in0 (..., C) -> out (..., C), softmax or log-softmax over the last axis; rows are contiguous.
bool supports_softmax(const kestrel_op& op) {
  return kestrel::plugin_shapes::softmax_fits(op) && all_contiguous(op);
}

void launch_softmax(const kestrel_op& op) {
  const bool log = params_of<kestrel_softmax_params>(op, "softmax").log != 0;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const int64_t cols = in.shape[in.rank - 1];
  if (cols == 0) return;
  const int64_t rows = numel(in) / cols;
  dispatch_float(in.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S* x = data_of<S>(in);
    S* y = mutable_data_of<S>(out);
    parallel_for_split("kestrel::softmax", rows, rows * cols, [=](int64_t r) {
      softmax_row<E>(x + r * cols, y + r * cols, cols, log, row_scratch(cols));
    });
  });
}

// SOFTMAX_CROSS_ENTROPY: in0 logits (N, C), in1 labels (N) -> out0 loss (N) [, out1 dlogits (N, C) =
// softmax - onehot]. SOFTMAX_CROSS_ENTROPY_BACKWARD: in0 logits, in1 labels, in2 scales (N) -> out0 dlogits
// (N, C) = (softmax - onehot) * scale. Logits (and backward's dlogits) in rows a stride apart; the
// two-output forward all contiguous.
bool supports_softmax_cross_entropy(const kestrel_op& op) {
  namespace shapes = kestrel::plugin_shapes;
  if (op.kind == KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD)
    return shapes::softmax_cross_entropy_backward_fits(op, /*losses=*/true) && shapes::softmax_cross_entropy_in_rows(op);
  return shapes::softmax_cross_entropy_fits(op) && (all_contiguous(op) || shapes::softmax_cross_entropy_in_rows(op));
}

namespace {

using kestrel::plugin_shapes::row_stride;

void launch_cross_entropy_backward(const kestrel_op& op) {
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1], &scales = op.inputs[2];
  const int64_t rows = logits.shape[0], cols = logits.shape[1], scale_stride = scales.strides[0];
  const int64_t x_stride = row_stride(logits), grad_stride = row_stride(op.outputs[0]);
  dispatch_float(logits.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S* x = data_of<S>(logits);
    S* grad = mutable_data_of<S>(op.outputs[0]);
    using A = Acc<E>;
    const A* scale = data_of<A>(scales);  // f64 beside f64 logits, else f32: A
    const A* losses = op.num_inputs == 4 ? data_of<A>(op.inputs[3]) : nullptr;  // (rows), forward's
    parallel_for_split("kestrel::softmax_cross_entropy_backward", rows, rows * cols, [=, &labels](int64_t r) {
      const int64_t label = label_at(labels, r);
      const A* loss = losses && label >= 0 && label < cols && losses[r] <= A(kestrel::plugin_shapes::kCrossEntropyLossShortcut) ? losses + r : nullptr;
      cross_entropy_grad_row<E>(x + r * x_stride, cols, label, scale[r * scale_stride], loss, grad + r * grad_stride,
                                row_scratch<A>(cols));
    });
  });
}

}  // namespace

void launch_softmax_cross_entropy(const kestrel_op& op) {
  if (op.kind == KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD) return launch_cross_entropy_backward(op);
  const kestrel_tensor &logits = op.inputs[0], &labels_desc = op.inputs[1];
  const int64_t rows = logits.shape[0], cols = logits.shape[1];
  // Labels are read as int64 whatever their storage, and checked before anything is written.
  std::vector<int64_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) {
    labels[r] = label_at(labels_desc, r);
    if (labels[r] < 0 || labels[r] >= cols)
      fail("softmax_cross_entropy: label " + std::to_string(labels[r]) + " of sample " + std::to_string(r) +
           " is outside the " + std::to_string(cols) + " classes");
  }
  const int64_t* label = labels.data();
  const int64_t x_stride = row_stride(logits);  // the two-output form's are contiguous: cols
  dispatch_float(logits.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S* x = data_of<S>(logits);
    S* grad = op.num_outputs == 2 ? mutable_data_of<S>(op.outputs[1]) : nullptr;
    auto rows_into = [&](auto loss_elem) {  // the loss in the logits' dtype, or f32 beside 16-bit logits
      using L = decltype(loss_elem);
      typename L::storage* loss = mutable_data_of<typename L::storage>(op.outputs[0]);
      parallel_for_split("kestrel::softmax_cross_entropy", rows, rows * cols, [=](int64_t r) {
        cross_entropy_row<E, L>(x + r * x_stride, cols, label[r], loss + r, grad ? grad + r * cols : nullptr,
                                row_scratch(cols));
      });
    };
    if (op.outputs[0].dtype == logits.dtype)
      rows_into(E{});
    else
      rows_into(F32{});
  });
}

// Adam/AdamW: in0 param, in1 grad, in2 m, in3 v (updated in place; the grad only zeroed, if asked).
// SGD: in0 param, in1 grad [, in2 momentum buffer]. Same shape, contiguous, f32 or f64.
bool supports_optimizer(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::optimizer_fits(op) || !all_contiguous(op)) return false;
  return op.inputs[0].dtype == KESTREL_DTYPE_F32 || op.inputs[0].dtype == KESTREL_DTYPE_F64;
}

namespace {

// The updates run over blocks of kBlock elements: inside a block the loop has no aliasing and no calls,
// so the compiler vectorises it. An update is a pass over parameters, gradients and both moments — tens
// of megabytes that no cache keeps between steps — and two cores draw more memory bandwidth than one
// (seeds' MLP, 3.15M parameters, caches cold: 3.8 ms on one thread, 2.3 ms on two), so large updates
// are split over host threads where Kokkos has none (cpu_parallel.hpp).
constexpr int64_t kBlock = 4096;

template <class Body>
void for_blocks(const char* label, int64_t n, Body body) {
  parallel_for_split(label, (n + kBlock - 1) / kBlock, n, [=](int64_t block) {
    const int64_t begin = block * kBlock;
    body(begin, std::min(n, begin + kBlock));
  });
}

// The block loops are built once per x86 vector width (KESTREL_VECTOR_CLONES, cpu_ops.hpp).

template <class T>
struct AdamCoefficients {
  T decay, l2, scale, b1, b2, step_size, inv_bias2_sqrt, eps;
};

// The same arithmetic as torch.optim.Adam/AdamW (non-fused, non-amsgrad), over elements [0, n).
template <class T>
[[gnu::always_inline]] inline void adam_block(T* __restrict param, T* __restrict grad, T* __restrict m,
                                              T* __restrict v, int64_t n, const AdamCoefficients<T>& c) {
  for (int64_t i = 0; i < n; ++i) {
    T x = param[i] * c.decay;                   // AdamW's decoupled decay (decay is 1 for Adam)
    T g = grad[i] * c.scale + c.l2 * param[i];  // Adam's L2 term (l2 is 0 for AdamW)
    T mi = c.b1 * m[i] + (T(1) - c.b1) * g;
    T vi = c.b2 * v[i] + (T(1) - c.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = x - c.step_size * mi / (std::sqrt(vi) * c.inv_bias2_sqrt + c.eps);
  }
}

KESTREL_VECTOR_CLONES void adam_block_f32(float* param, float* grad, float* m, float* v, int64_t n,
                                          const AdamCoefficients<float>& c) {
  adam_block(param, grad, m, v, n, c);
}

KESTREL_VECTOR_CLONES void adam_block_f64(double* param, double* grad, double* m, double* v, int64_t n,
                                          const AdamCoefficients<double>& c) {
  adam_block(param, grad, m, v, n, c);
}

// What loss scaling's state on the device (plugin.h, 1.5) asks of this update: read when the op runs.
struct Scaling {
  bool skip = false;         // the gradients overflowed: change nothing
  double grad_scale = 1.0;   // what the gradient is multiplied by
  int64_t skipped = 0;       // updates skipped before this one
};

Scaling scaling_of(const kestrel_op& op, bool scaled, double grad_scale) {
  if (!scaled) return {false, grad_scale, 0};
  const float* state = data_of<float>(op.inputs[op.num_inputs - 1]);  // [scale, clean_steps, skipped_steps, found_inf]
  return {state[3] != 0.0f, 1.0 / double(state[0]), int64_t(state[2])};
}

template <class T>
void zero_gradient(const kestrel_op& op) {
  T* grad = mutable_data_of<T>(op.inputs[1]);
  std::fill(grad, grad + numel(op.inputs[1]), T(0));
}

template <class T>
void adam(const kestrel_op& op, const kestrel_adam_params& p) {
  const Scaling scaling = scaling_of(op, p.scaler != 0, p.grad_scale);
  if (scaling.skip) {
    if (p.zero_grad) zero_gradient<T>(op);
    return;
  }
  T *param = mutable_data_of<T>(op.inputs[0]), *grad = mutable_data_of<T>(op.inputs[1]);
  T *m = mutable_data_of<T>(op.inputs[2]), *v = mutable_data_of<T>(op.inputs[3]);
  const int64_t step = p.step - scaling.skipped;
  if (step < 1) fail("adam_update: step " + std::to_string(p.step) + " with " + std::to_string(scaling.skipped) +
                     " skipped before it: the updates made count from 1");
  const double bias1 = 1.0 - std::pow(p.beta1, double(step));
  const double bias2 = 1.0 - std::pow(p.beta2, double(step));
  const T lr = T(p.lr), wd = T(p.weight_decay);
  const AdamCoefficients<T> c{p.decoupled ? T(1) - lr * wd : T(1), p.decoupled ? T(0) : wd, T(scaling.grad_scale),
                              T(p.beta1), T(p.beta2), T(p.lr / bias1), T(1.0 / std::sqrt(bias2)), T(p.eps)};
  const bool zero_grad = p.zero_grad != 0;
  for_blocks("kestrel::adam_update", numel(op.inputs[0]), [=](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>)
      adam_block_f32(param + begin, grad + begin, m + begin, v + begin, end - begin, c);
    else
      adam_block_f64(param + begin, grad + begin, m + begin, v + begin, end - begin, c);
    if (zero_grad) std::fill(grad + begin, grad + end, T(0));  // while the block is still in cache
  });
}

template <class T>
void sgd(const kestrel_op& op, const kestrel_sgd_params& p) {
  const Scaling scaling = scaling_of(op, p.scaler != 0, p.grad_scale);
  if (scaling.skip) {
    if (p.zero_grad) zero_gradient<T>(op);
    return;
  }
  T *param_base = mutable_data_of<T>(op.inputs[0]), *grad_base = mutable_data_of<T>(op.inputs[1]);
  T* buf_base = op.num_inputs - (p.scaler != 0) == 3 ? mutable_data_of<T>(op.inputs[2]) : nullptr;
  const T lr = T(p.lr), momentum = T(p.momentum), dampening = T(p.dampening), wd = T(p.weight_decay);
  const T scale = T(scaling.grad_scale);
  const bool first = p.scaler ? p.step - scaling.skipped == 1 : p.first_step != 0;
  const bool nesterov = p.nesterov != 0, zero_grad = p.zero_grad != 0;
  for_blocks("kestrel::sgd_update", numel(op.inputs[0]), [=](int64_t begin, int64_t end) {
    T* __restrict param = param_base;
    T* __restrict grad = grad_base;
    T* __restrict buf = buf_base;
    for (int64_t i = begin; i < end; ++i) {
      T d = grad[i] * scale + wd * param[i];
      if (buf && momentum != T(0)) {
        buf[i] = first ? d : momentum * buf[i] + (T(1) - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      param[i] -= lr * d;
    }
    if (zero_grad) std::fill(grad + begin, grad + end, T(0));
  });
}

}  // namespace

void launch_optimizer(const kestrel_op& op) {
  const bool f32 = op.inputs[0].dtype == KESTREL_DTYPE_F32;
  if (op.kind == KESTREL_OP_ADAM_UPDATE) {
    const auto& p = params_of<kestrel_adam_params>(op, "adam_update");
    if (p.step < 1) fail("adam_update: step counts from 1");
    f32 ? adam<float>(op, p) : adam<double>(op, p);
  } else {
    const auto& p = params_of<kestrel_sgd_params>(op, "sgd_update");
    f32 ? sgd<float>(op, p) : sgd<double>(op, p);
  }
}

}  // namespace kestrel_cpu
