// Optional fused ops: softmax, softmax + cross-entropy, and the Adam/AdamW/SGD parameter updates.
// Each is what the engine would otherwise compose from several primitive launches.
#include <cmath>

#include "cuda_kernels.cuh"
#include "elementwise_packed.cuh"

namespace kestrel_cuda {

namespace {

constexpr int kMaxRowBlock = 256;

int row_block(int64_t cols) {
  int block = 32;
  while (block < kMaxRowBlock && block < cols) block *= 2;
  return block;
}

// f32 and f64 rows are accumulated in double (the CPU reference does the same); f16/bf16 in f32.
template <class E>
using RowAcc = std::conditional_t<std::is_same<typename E::storage, uint16_t>::value, float, double>;

// One contiguous row's largest value and sum(exp(x - top)), computed by the whole block. Callers shift
// by top and divide by (or subtract the log of) the sum rather than subtract log(sum) + top: where every
// entry is huge and negative (-1e29 on attention's padded keys), log(sum) vanishes beside top in rounding
// and exp(x - lse) would give each of k equal entries 1 instead of 1/k.
template <class E>
struct RowStats {
  RowAcc<E> top, sum;
};

template <class E>
__device__ RowStats<E> row_stats(const typename E::storage* xr, int64_t cols) {
  using A = RowAcc<E>;
  using S = typename E::storage;
  A top = A(E::load(xr[0]));
  visit_row(xr, cols, [&](int64_t, S v) { top = nan_max(top, A(E::load(v))); });
  top = block_all_reduce(top, A(-INFINITY), MaxOp{});
  A sum = 0;
  visit_row(xr, cols, [&](int64_t, S v) { sum += exp(A(E::load(v)) - top); });
  return {top, block_all_reduce(sum, A(0), SumOp{})};
}

template <class E>
__global__ void softmax_kernel(const typename E::storage* x, typename E::storage* y, int64_t rows, int64_t cols,
                               bool log_mode) {
  using A = RowAcc<E>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::storage* xr = x + r * cols;
    typename E::storage* yr = y + r * cols;
    const RowStats<E> row = row_stats<E>(xr, cols);
    const A log_sum = log(row.sum);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const A shifted = A(E::load(xr[j])) - row.top;
      yr[j] = E::store(typename E::compute(log_mode ? shifted - log_sum : exp(shifted) / row.sum));
    }
  }
}

// LossE: the loss's element type, the logits' (E) or F32 beside 16-bit logits (plugin ABI 1.12). x's rows
// are x_stride apart (the logits may be a slice of a padded product's rows); grad, when asked, is contiguous.
template <class E, class LossE, class L>
__global__ void cross_entropy_kernel(const typename E::storage* x, int64_t x_stride, const L* labels,
                                     typename LossE::storage* loss, typename E::storage* grad, int64_t rows,
                                     int64_t cols, DeviceErrorSlot* error) {
  using A = RowAcc<E>;
  using C = typename E::compute;
  using LossC = typename LossE::compute;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::storage* xr = x + r * x_stride;
    const long long label = static_cast<long long>(labels[r]);
    const bool valid = label >= 0 && label < cols;
    if (!valid && threadIdx.x == 0) report_error(error, DEVICE_ERROR_LABEL, label, cols);
    const RowStats<E> row = row_stats<E>(xr, cols);
    if (threadIdx.x == 0)
      loss[r] = LossE::store(valid ? LossC(log(row.sum) - (A(E::load(xr[label])) - row.top)) : LossC(NAN));
    if (grad)
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
        grad[r * cols + j] = E::store(
            valid ? C(exp(A(E::load(xr[j])) - row.top) / row.sum - (j == label ? A(1) : A(0))) : C(NAN));
  }
}

// The logits' gradient from the logits, (softmax - onehot) * the row's scale, rounded once. scales: f32, or
// f64 beside f64 logits; scale_stride 0 gives every row the first. A label outside [0, cols) subtracts
// nothing: forward has reported it. x's rows are x_stride apart, grad's grad_stride.
// With losses (ABI 1.14: forward's, per row), a row whose label is in [0, cols) and whose loss is within
// kCrossEntropyLossShortcut takes its log-sum-exp as loss + x[label]: one pass over the row instead of
// three (GPT-2's 823 MB of logits, 2026-11-27); larger losses (and NaN, infinity) take the row's
// statistics as without losses.
template <class E, class L, class Scale>
__global__ void cross_entropy_backward_kernel(const typename E::storage* x, int64_t x_stride, const L* labels,
                                              const Scale* scales, int64_t scale_stride, const Scale* losses,
                                              typename E::storage* grad, int64_t grad_stride, int64_t rows,
                                              int64_t cols) {
  using A = RowAcc<E>;
  using C = typename E::compute;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::storage* xr = x + r * x_stride;
    const long long label = static_cast<long long>(labels[r]);
    const A scale = A(scales[r * scale_stride]);
    // The same for every thread of the block (one row each), so row_stats' block-wide folds stay uniform.
    const bool from_loss = losses && label >= 0 && label < cols && losses[r] <= Scale(kestrel::plugin_shapes::kCrossEntropyLossShortcut);
    const RowStats<E> row = from_loss ? RowStats<E>{A(losses[r]) + A(E::load(xr[label])), A(1)} : row_stats<E>(xr, cols);
    typename E::storage* gr = grad + r * grad_stride;
    auto gradient = [&](int64_t j, typename E::storage v) {
      return E::store(C((exp(A(E::load(v)) - row.top) / row.sum - (j == label ? A(1) : A(0))) * scale));
    };
    // Whole packs in and out where both rows start on 16-byte boundaries, the rest one at a time.
    using P = Pack<typename E::storage, pack_elements<typename E::storage>()>;
    constexpr int K = pack_elements<typename E::storage>();
    const bool packed = reinterpret_cast<uintptr_t>(xr) % 16 == 0 && reinterpret_cast<uintptr_t>(gr) % 16 == 0;
    const int64_t packs = packed ? cols / K : 0;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const P v = reinterpret_cast<const P*>(xr)[p];
      P g;
#pragma unroll
      for (int k = 0; k < K; ++k) g.v[k] = gradient(p * K + k, v.v[k]);
      reinterpret_cast<P*>(gr)[p] = g;
    }
    for (int64_t j = packs * K + threadIdx.x; j < cols; j += blockDim.x) gr[j] = gradient(j, xr[j]);
  }
}

// Loss scaling's state on the device (plugin.h, 1.5), [scale, clean_steps, skipped_steps, found_inf], or
// null: each thread reads it when the kernel runs, so a replayed launch sees the current state.
__device__ inline bool overflowed(const float* scaler) { return scaler && scaler[3] != 0.0f; }

struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step;               // counted from 1, skipped updates included when there is a scaler
  double step_size, bias2_sqrt;  // lr / (1 - beta1^step) and sqrt(1 - beta2^step), from the host's libm
  bool decoupled, zero_grad;
};

// One parameter's update, the same arithmetic as torch.optim.Adam/AdamW (non-fused, non-amsgrad) and
// the CPU backend.
template <class T>
struct AdamMath {
  T scale, lr, b1, b2, eps, wd, step_size, bias2_sqrt;
  bool decoupled;
  __device__ void operator()(T& p, T& m, T& v, T g) const {
    g *= scale;
    if (decoupled)
      p *= T(1) - lr * wd;
    else
      g += wd * p;
    m = b1 * m + (T(1) - b1) * g;
    v = b2 * v + (T(1) - b2) * g * g;
    p = p - step_size * m / (sqrt(v) / bias2_sqrt + eps);
  }
};

// After skipped updates the bias corrections are recomputed here, in double, for the updates actually
// made. The four arrays move in 16-byte packs where all start on a 16-byte boundary (`packed`), the
// rest one element at a time: element by element the update reached about three quarters of the copy
// bandwidth (2.3 ms for the 8192-wide MLP's 268M parameters on an H200, 2026-11-27), and the optimizer is
// a tenth of that step.
template <class T>
__global__ void adam_kernel(T* param, T* grad, T* m, T* v, int64_t n, AdamArgs a, const float* scaler, bool packed) {
  const bool skip = overflowed(scaler);
  double grad_scale = a.grad_scale, step_size = a.step_size, bias2_sqrt = a.bias2_sqrt;
  if (scaler) grad_scale = 1.0 / double(scaler[0]);
  if (scaler && scaler[2] != 0.0f) {
    const double t = double(a.step - int64_t(scaler[2]));
    step_size = a.lr / (1.0 - pow(a.beta1, t)), bias2_sqrt = sqrt(1.0 - pow(a.beta2, t));
  }
  const AdamMath<T> update{T(grad_scale), T(a.lr), T(a.beta1), T(a.beta2), T(a.eps), T(a.weight_decay),
                           T(step_size), T(bias2_sqrt), a.decoupled};
  constexpr int K = pack_elements<T>();
  using P = Pack<T, K>;
  const int64_t packs = packed ? n / K : 0;
  KESTREL_GRID_STRIDE_LOOP(q, packs) {
    const P g = reinterpret_cast<const P*>(grad)[q];
    if (a.zero_grad) reinterpret_cast<P*>(grad)[q] = P{};
    if (skip) continue;
    P pp = reinterpret_cast<P*>(param)[q], mm = reinterpret_cast<P*>(m)[q], vv = reinterpret_cast<P*>(v)[q];
#pragma unroll
    for (int k = 0; k < K; ++k) update(pp.v[k], mm.v[k], vv.v[k], g.v[k]);
    reinterpret_cast<P*>(param)[q] = pp;
    reinterpret_cast<P*>(m)[q] = mm;
    reinterpret_cast<P*>(v)[q] = vv;
  }
  KESTREL_GRID_STRIDE_LOOP(j, n - packs * K) {
    const int64_t i = packs * K + j;
    const T g = grad[i];
    if (a.zero_grad) grad[i] = T(0);
    if (skip) continue;
    update(param[i], m[i], v[i], g);
  }
}

struct SgdArgs {
  double lr, momentum, dampening, weight_decay, grad_scale;
  int64_t step;  // with a scaler: counted from 1, skipped updates included
  bool nesterov, first_step, zero_grad;
};

template <class T>
__global__ void sgd_kernel(T* param, T* grad, T* buf, int64_t n, SgdArgs a, const float* scaler) {
  const bool skip = overflowed(scaler);
  const T scale = T(scaler ? 1.0 / double(scaler[0]) : a.grad_scale);
  const bool first = scaler ? a.step - int64_t(scaler[2]) == 1 : a.first_step;
  const T lr = T(a.lr), momentum = T(a.momentum), dampening = T(a.dampening), wd = T(a.weight_decay);
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    T d = grad[i] * scale + wd * param[i];
    if (a.zero_grad) grad[i] = T(0);
    if (skip) continue;
    if (buf && momentum != T(0)) {
      T b = first ? d : momentum * buf[i] + (T(1) - dampening) * d;
      buf[i] = b;
      d = a.nesterov ? d + momentum * b : b;
    }
    param[i] -= lr * d;
  }
}

unsigned row_grid(int64_t rows) { return unsigned(std::max<int64_t>(1, std::min<int64_t>(rows, 1 << 20))); }

}  // namespace

// in0 (..., C) -> out (..., C), softmax or log-softmax over the last axis; rows are contiguous.
bool supports_softmax(const kestrel_op& op) {
  return kestrel::plugin_shapes::softmax_fits(op) && all_contiguous(op);
}

void launch_softmax(kestrel_stream& s, const kestrel_op& op) {
  const bool log_mode = params_of<kestrel_softmax_params>(op, "softmax").log != 0;
  const TensorRef in = ref(op.inputs[0]), out = ref(op.outputs[0]);
  const int64_t cols = in.shape[in.rank - 1];
  if (cols == 0 || in.numel() == 0) return;
  const int64_t rows = in.numel() / cols;
  dispatch_float(in.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    softmax_kernel<E><<<row_grid(rows), row_block(cols), 0, s.cuda>>>(
        reinterpret_cast<const S*>(in.base), reinterpret_cast<S*>(out.base), rows, cols, log_mode);
  });
  check_launch("softmax");
}

// SOFTMAX_CROSS_ENTROPY: in0 logits (N, C), in1 labels (N) -> out0 loss (N) [, out1 dlogits (N, C) =
// softmax - onehot]. SOFTMAX_CROSS_ENTROPY_BACKWARD: in0 logits, in1 labels, in2 scales (N) -> out0
// dlogits (N, C) = (softmax - onehot) * scale.
bool supports_softmax_cross_entropy(const kestrel_op& op) {
  namespace shapes = kestrel::plugin_shapes;
  if (op.kind == KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD)
    return shapes::softmax_cross_entropy_backward_fits(op, /*losses=*/true) && shapes::softmax_cross_entropy_in_rows(op);
  return shapes::softmax_cross_entropy_fits(op) && (all_contiguous(op) || shapes::softmax_cross_entropy_in_rows(op));
}

namespace {

using kestrel::plugin_shapes::row_stride;

void launch_cross_entropy_backward(kestrel_stream& s, const kestrel_op& op) {
  const TensorRef logits = ref(op.inputs[0]), labels = ref(op.inputs[1]), scales = ref(op.inputs[2]),
                  grad = ref(op.outputs[0]);
  const int64_t rows = logits.shape[0], cols = logits.shape[1], scale_stride = op.inputs[2].strides[0];
  if (rows == 0) return;
  dispatch_float(logits.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using Scale = std::conditional_t<std::is_same<S, double>::value, double, float>;
    dispatch_index(labels.dtype, [&](auto label_type) {
      using L = decltype(label_type);
      cross_entropy_backward_kernel<E, L, Scale><<<row_grid(rows), row_block(cols), 0, s.cuda>>>(
          reinterpret_cast<const S*>(logits.base), row_stride(op.inputs[0]), reinterpret_cast<const L*>(labels.base),
          reinterpret_cast<const Scale*>(scales.base), scale_stride,
          op.num_inputs == 4 ? reinterpret_cast<const Scale*>(ref(op.inputs[3]).base) : nullptr, reinterpret_cast<S*>(grad.base),
          row_stride(op.outputs[0]), rows, cols);
    });
  });
  check_launch("softmax_cross_entropy_backward");
}

}  // namespace

void launch_softmax_cross_entropy(kestrel_stream& s, const kestrel_op& op) {
  if (op.kind == KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD) return launch_cross_entropy_backward(s, op);
  const TensorRef logits = ref(op.inputs[0]), labels = ref(op.inputs[1]), loss = ref(op.outputs[0]);
  const int64_t rows = logits.shape[0], cols = logits.shape[1];
  if (rows == 0) return;
  char* grad = op.num_outputs == 2 ? ref(op.outputs[1]).base : nullptr;
  const bool f32_loss = loss.dtype != logits.dtype;  // beside 16-bit logits (1.12)
  dispatch_float(logits.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    auto go = [&](auto loss_elem, auto label_type) {
      using LossE = decltype(loss_elem);
      using L = decltype(label_type);
      cross_entropy_kernel<E, LossE, L><<<row_grid(rows), row_block(cols), 0, s.cuda>>>(
          reinterpret_cast<const S*>(logits.base), row_stride(op.inputs[0]), reinterpret_cast<const L*>(labels.base),
          reinterpret_cast<typename LossE::storage*>(loss.base), reinterpret_cast<S*>(grad), rows, cols,
          s.error_device);
    };
    dispatch_index(labels.dtype, [&](auto label_type) {
      if (f32_loss)
        go(F32{}, label_type);
      else
        go(E{}, label_type);
    });
  });
  check_launch("softmax_cross_entropy");
}

// Adam/AdamW: in0 param, in1 grad, in2 m, in3 v (all updated in place but the grad).
// SGD: in0 param, in1 grad [, in2 momentum buffer]. Same size, contiguous, f32 or f64.
bool supports_optimizer(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::optimizer_fits(op) || !all_contiguous(op)) return false;
  return op.inputs[0].dtype == KESTREL_DTYPE_F32 || op.inputs[0].dtype == KESTREL_DTYPE_F64;
}

void launch_optimizer(kestrel_stream& s, const kestrel_op& op) {
  const int64_t n = numel(op.inputs[0]);
  const bool scaled = kestrel::plugin_shapes::optimizer_has_scaler(op);
  const float* scaler = scaled ? reinterpret_cast<const float*>(ref(op.inputs[op.num_inputs - 1]).base) : nullptr;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    auto ptr = [&](int i) { return reinterpret_cast<T*>(ref(op.inputs[i]).base); };
    if (op.kind == KESTREL_OP_ADAM_UPDATE) {
      const auto& p = params_of<kestrel_adam_params>(op, "adam_update");
      if (p.step < 1) fail("adam_update: step counts from 1");
      if (n == 0) return;
      const double bias1 = 1.0 - std::pow(p.beta1, double(p.step)), bias2 = 1.0 - std::pow(p.beta2, double(p.step));
      const AdamArgs a{p.lr,   p.beta1,          p.beta2,          p.eps,           p.weight_decay,
                       p.grad_scale, p.step, p.lr / bias1, std::sqrt(bias2), p.decoupled != 0, p.zero_grad != 0};
      bool packed = !generic_elementwise();
      for (int i = 0; i < 4; ++i) packed = packed && reinterpret_cast<uintptr_t>(ptr(i)) % 16 == 0;
      const int64_t threads = packed ? (n + pack_elements<T>() - 1) / pack_elements<T>() : n;
      adam_kernel<T><<<grid_for(threads), kBlock, 0, s.cuda>>>(ptr(0), ptr(1), ptr(2), ptr(3), n, a, scaler, packed);
    } else {
      const auto& p = params_of<kestrel_sgd_params>(op, "sgd_update");
      if (n == 0) return;
      const SgdArgs a{p.lr, p.momentum, p.dampening, p.weight_decay, p.grad_scale, p.step, p.nesterov != 0,
                      p.first_step != 0, p.zero_grad != 0};
      T* buf = op.num_inputs - int(scaled) == 3 ? ptr(2) : nullptr;
      sgd_kernel<T><<<grid_for(n), kBlock, 0, s.cuda>>>(ptr(0), ptr(1), buf, n, a, scaler);
    }
  };
  if (op.inputs[0].dtype == KESTREL_DTYPE_F32)
    run(float{});
  else
    run(double{});
  check_launch(op.kind == KESTREL_OP_ADAM_UPDATE ? "adam_update" : "sgd_update");
}

}  // namespace kestrel_cuda
