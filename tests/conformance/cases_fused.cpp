// Optional fused ops. A plugin may decline them (counted as unsupported); when it runs one, the result
// must match the reference of the composed primitives.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

template <class P>
P params() {
  P p{};
  p.struct_size = kestrel::abi_size<P>;
  return p;
}

// Launches a fused op through the engine (which refuses with Unsupported when the plugin declines).
void launch(const Device& device, kestrel_op_kind kind, const void* p, std::vector<Tensor> inputs,
            std::vector<Tensor> outputs) {
  ops::launch(device, op_of(kind, p, inputs, outputs));
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// torch.optim.Adam/AdamW's update of element i in double, on the gradient g (already unscaled), as
// update number `made` (its bias corrections).
void adam_reference(const kestrel_adam_params& p, int64_t made, double g, double& param, double& m, double& v) {
  if (p.decoupled)
    param *= 1 - p.lr * p.weight_decay;
  else
    g += p.weight_decay * param;
  m = p.beta1 * m + (1 - p.beta1) * g;
  v = p.beta2 * v + (1 - p.beta2) * g * g;
  const double mhat = m / (1 - std::pow(p.beta1, double(made))), vhat = v / (1 - std::pow(p.beta2, double(made)));
  param -= p.lr * mhat / (std::sqrt(vhat) + p.eps);
}

}  // namespace

void fused_cases(Runner& r) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    std::string dt(dtype_name(dtype));
    // linear: x (M, K) @ w^T where w is stored (N, K) like torch.nn.Linear, + bias, then activation.
    // padded: the outputs' rows are padded (a view of a wider matrix), as the engine pads products whose
    // rows would miss the device's preferred GEMM alignment. large: 150 x 130 outputs, more than one of
    // Vulkan's large 128 x 128 tiles each way (with bias and ReLU, dense).
    for (auto act : {KESTREL_ACTIVATION_NONE, KESTREL_ACTIVATION_RELU, KESTREL_ACTIVATION_GELU})
      for (bool bias : {true, false})
        for (bool keep_pre : {true, false})
          for (bool padded : {false, true})
          for (bool large : {false, true}) {
          if (large && (act != KESTREL_ACTIVATION_RELU || !bias || padded)) continue;
          r.run(case_name({"linear", dt, fmt::format("act{}", static_cast<int>(act)), bias ? "bias" : "nobias",
                           keep_pre ? "preact" : "noreact", padded ? "padded" : large ? "dense 150x20x130" : "dense"}),
                false, [&] {
                  const int64_t m = large ? 150 : 8, k = large ? 20 : 5, n = large ? 130 : 3;
                  auto x = r.values(m * k, -1, 1, dtype), w = r.values(n * k, -1, 1, dtype), b = r.values(n, -1, 1, dtype);
                  auto p = params<kestrel_linear_params>();
                  p.activation = act;
                  std::vector<Tensor> in = {r.upload({m, k}, x, dtype), r.upload({n, k}, w, dtype).transpose(0, 1)};
                  if (bias) in.push_back(r.upload({n}, b, dtype));
                  auto result = [&] {
                    return padded ? Tensor::empty({m, n + 5}, dtype, r.device()).slice(1, 0, n)
                                  : Tensor::empty({m, n}, dtype, r.device());
                  };
                  std::vector<Tensor> out = {result()};
                  if (keep_pre) out.push_back(result());
                  launch(r.device(), KESTREL_OP_LINEAR, &p, in, out);
                  std::vector<double> want_pre(m * n), want(m * n);
                  for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) {
                      double v = bias ? b[j] : 0.0;
                      for (int64_t q = 0; q < k; ++q) v += x[i * k + q] * w[j * k + q];
                      want_pre[i * n + j] = v;
                      want[i * n + j] = act == KESTREL_ACTIVATION_RELU ? std::max(v, 0.0)
                                        : act == KESTREL_ACTIVATION_GELU ? gelu(v) : v;
                    }
                  r.expect_close(out[0], want, tolerance_for(dtype, 8), "output");
                  if (keep_pre) r.expect_close(out[1], want_pre, tolerance_for(dtype, 8), "pre-activation");
                });
          }
    // A NaN in an input row makes that row's outputs NaN, and ReLU keeps them so (as torch.relu does):
    // a backend whose ReLU is max(v, 0) would hide an overflow from f16 loss scaling and --detect-anomaly.
    r.run(case_name({"linear", dt, "relu keeps NaN"}), false, [&] {
      const int64_t m = 4, k = 5, n = 3;
      auto x = r.values(m * k, -1, 1, dtype), w = r.values(n * k, -1, 1, dtype), b = r.values(n, -1, 1, dtype);
      x[1 * k + 2] = std::numeric_limits<double>::quiet_NaN();
      auto p = params<kestrel_linear_params>();
      p.activation = KESTREL_ACTIVATION_RELU;
      Tensor y = Tensor::empty({m, n}, dtype, r.device());
      launch(r.device(), KESTREL_OP_LINEAR, &p,
             {r.upload({m, k}, x, dtype), r.upload({n, k}, w, dtype).transpose(0, 1), r.upload({n}, b, dtype)}, {y});
      std::vector<double> want(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double v = b[j];
          for (int64_t q = 0; q < k; ++q) v += x[i * k + q] * w[j * k + q];
          want[i * n + j] = std::isnan(v) ? v : std::max(v, 0.0);
        }
      r.expect_close(y, want, tolerance_for(dtype, 8), "output");
    });
    // padded: attention's scores of padded keys (-1e29) and causally hidden ones (-1e30) in every row,
    // the first row seeing padding only, whose softmax must weigh its five padded entries 1/5 each (f16
    // cannot hold them).
    for (bool log : {false, true})
      for (Shape shape : {Shape{4, 7}, Shape{2, 3, 5}})
        for (bool padded : {false, true}) {
          if (padded && (shape.size() != 2 || dtype == DType::f16)) continue;
          const std::string name = case_name({log ? "log_softmax" : "softmax", dt, shape_str(shape)});
          r.run(padded ? name + "/padded" : name, false, [&] {
            auto x = r.values(shape_numel(shape), -4, 4, dtype);
            if (padded)
              for (int64_t i = 0; i < int64_t(x.size()); ++i) {
                const int64_t row = i / shape[1], col = i % shape[1];
                if (row == 0) x[i] = col < 5 ? -1e29 : -1e30;
                else if ((col + row) % 3 == 0) x[i] = -1e29;
              }
            auto p = params<kestrel_softmax_params>();
            p.log = log;
            Tensor out = Tensor::empty(shape, dtype, r.device());
            launch(r.device(), KESTREL_OP_SOFTMAX, &p, {r.upload(shape, x, dtype)}, {out});
            const int64_t cols = shape.back();
            std::vector<double> want(x.size());
            for (size_t row = 0; row < x.size() / cols; ++row) {
              double top = -INFINITY, sum = 0;
              for (int64_t j = 0; j < cols; ++j) top = std::max(top, x[row * cols + j]);
              for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[row * cols + j] - top);
              for (int64_t j = 0; j < cols; ++j) {
                double shifted = x[row * cols + j] - top;
                want[row * cols + j] = log ? shifted - std::log(sum) : std::exp(shifted) / sum;
              }
            }
            r.expect_close(out, want, tolerance_for(dtype, 4));
          });
        }
    for (DType label_dtype : {DType::i64, DType::i32})
      r.run(case_name({"softmax_cross_entropy", dt, std::string(dtype_name(label_dtype))}), false, [&] {
        const int64_t n = 6, c = 5;
        auto x = r.values(n * c, -4, 4, dtype);
        auto labels = r.values(n, 0, c, DType::i64);
        Tensor loss = Tensor::empty({n}, dtype, r.device()), grad = Tensor::empty({n, c}, dtype, r.device());
        launch(r.device(), KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr,
               {r.upload({n, c}, x, dtype), r.upload({n}, labels, label_dtype)}, {loss, grad});
        std::vector<double> want_loss(n), want_grad(n * c);
        for (int64_t i = 0; i < n; ++i) {
          double top = -INFINITY, sum = 0;
          for (int64_t j = 0; j < c; ++j) top = std::max(top, x[i * c + j]);
          for (int64_t j = 0; j < c; ++j) sum += std::exp(x[i * c + j] - top);
          double log_sum = top + std::log(sum);
          want_loss[i] = log_sum - x[i * c + static_cast<int64_t>(labels[i])];
          for (int64_t j = 0; j < c; ++j)
            want_grad[i * c + j] = std::exp(x[i * c + j] - log_sum) - (j == labels[i] ? 1.0 : 0.0);
        }
        r.expect_close(loss, want_loss, tolerance_for(dtype, 4), "loss");
        r.expect_close(grad, want_grad, tolerance_for(dtype, 4), "gradient");
      });
    // Plugin ABI 1.12: 16-bit logits with an f32 loss (mixed precision's logits read as they are), and the
    // gradient from the logits, scaled per row (one scale broadcast, or one per row). 3000 classes span
    // many of a GPU's or Vulkan's 256 lanes per row.
    const bool sixteen = dtype == DType::f16 || dtype == DType::bf16;
    const DType statistic = sixteen ? DType::f32 : dtype;
    for (DType label_dtype : {DType::i64, DType::i32})
      for (int64_t c : {5, 3000}) {
        const std::string classes = fmt::format("{} classes", c);
        auto reference = [&](const std::vector<double>& x, const std::vector<double>& labels, int64_t n,
                             std::vector<double>& loss, std::vector<double>& softmax) {
          loss.assign(n, 0.0);
          softmax.assign(n * c, 0.0);
          for (int64_t i = 0; i < n; ++i) {
            double top = -INFINITY, sum = 0;
            for (int64_t j = 0; j < c; ++j) top = std::max(top, x[i * c + j]);
            for (int64_t j = 0; j < c; ++j) sum += std::exp(x[i * c + j] - top);
            loss[i] = top + std::log(sum) - x[i * c + static_cast<int64_t>(labels[i])];
            for (int64_t j = 0; j < c; ++j) softmax[i * c + j] = std::exp(x[i * c + j] - top) / sum;
          }
        };
        if (sixteen)
          r.run(case_name({"softmax_cross_entropy", dt, std::string(dtype_name(label_dtype)), "f32 loss", classes}),
                false, [&] {
                  const int64_t n = 6;
                  auto x = r.values(n * c, -4, 4, dtype);
                  auto labels = r.values(n, 0, c, DType::i64);
                  Tensor loss = Tensor::empty({n}, DType::f32, r.device());
                  launch(r.device(), KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr,
                         {r.upload({n, c}, x, dtype), r.upload({n}, labels, label_dtype)}, {loss});
                  std::vector<double> want_loss, softmax;
                  reference(x, labels, n, want_loss, softmax);
                  r.expect_close(loss, want_loss, tolerance_for(DType::f32, c > 5 ? 64 : 4), "loss");
                });
        // Logits (and their gradient) a slice of wider rows: a linear layer's logits cut out of the padded
        // width its product ran at, read (and written) in place by the plugins that take a row stride. The
        // logits' rows are whole 16-byte packs wide, as a padded product's are; the gradient's are not (the
        // contiguous cases above have both kinds of rows together).
        const int64_t x_width = (c + 3 + 7) / 8 * 8, grad_width = c + 5;
        auto wide_rows = [&](const std::vector<double>& x, int64_t n, int64_t width) {  // (n, c) of (n, width)
          std::vector<double> wide(size_t(n * width), 0.5);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < c; ++j) wide[size_t(i * width + j)] = x[size_t(i * c + j)];
          return r.upload({n, width}, wide, dtype).slice(1, 0, c);
        };
        r.run(case_name({"softmax_cross_entropy", dt, std::string(dtype_name(label_dtype)), classes,
                         "rows a stride apart"}),
              false, [&] {
                const int64_t n = 6;
                auto x = r.values(n * c, -4, 4, dtype);
                auto labels = r.values(n, 0, c, DType::i64);
                Tensor loss = Tensor::empty({n}, statistic, r.device());
                launch(r.device(), KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr,
                       {wide_rows(x, n, x_width), r.upload({n}, labels, label_dtype)}, {loss});
                std::vector<double> want_loss, softmax;
                reference(x, labels, n, want_loss, softmax);
                r.expect_close(loss, want_loss, tolerance_for(statistic, c > 5 ? 64 : 4), "loss");
              });
        // with_losses (ABI 1.14): forward's losses as in3, each row's log-sum-exp taken from them.
        for (bool per_row : {false, true})
          for (bool strided : {false, true})
            for (bool with_losses : {false, true})
            r.run(case_name({"softmax_cross_entropy_backward", dt, std::string(dtype_name(label_dtype)), classes,
                             per_row ? "a scale per row" : "one scale"}) +
                      (strided ? "/rows a stride apart" : "") + (with_losses ? "/from forward's losses" : ""),
                  false, [&] {
                    const int64_t n = 6;
                    auto x = r.values(n * c, -4, 4, dtype);
                    auto labels = r.values(n, 0, c, DType::i64);
                    auto scales = r.values(per_row ? n : 1, 0.25, 4, statistic);
                    const Tensor scale_tensor = per_row ? r.upload({n}, scales, statistic)
                                                        : r.upload({1}, scales, statistic).expand({n});
                    Tensor grad = strided ? Tensor::empty({n, grad_width}, dtype, r.device()).slice(1, 0, c)
                                          : Tensor::empty({n, c}, dtype, r.device());
                    // One row's label far below the rest: a loss so large that a log-sum-exp taken from it
                    // (loss + x[label], the loss rounded as stored) would be visibly off, so a plugin must
                    // take that row the long way.
                    if (with_losses)
                      x[size_t(2 * c + int64_t(labels[2]))] = round_to(dtype, dtype == DType::f16 ? -6.0e4 : -1.0e6);
                    std::vector<double> loss, want;
                    reference(x, labels, n, loss, want);
                    std::vector<Tensor> inputs{strided ? wide_rows(x, n, x_width) : r.upload({n, c}, x, dtype),
                                               r.upload({n}, labels, label_dtype), scale_tensor};
                    if (with_losses) {
                      for (double& l : loss) l = round_to(statistic, l);  // as forward stored them
                      inputs.push_back(r.upload({n}, loss, statistic));
                    }
                    launch(r.device(), KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD, nullptr, inputs, {grad});
                    for (int64_t i = 0; i < n; ++i)
                      for (int64_t j = 0; j < c; ++j)
                        want[i * c + j] = (want[i * c + j] - (j == labels[i] ? 1.0 : 0.0)) * scales[per_row ? i : 0];
                    r.expect_close(grad, want, tolerance_for(dtype, 8), "gradient");
                  });
      }
    // Three optimizer steps against torch.optim's update rules written out in double; the long vectors
    // (an odd length) reach a backend's blocked and multi-threaded paths.
    const int64_t optimizer_sizes[] = {37, 300001};
    for (int64_t n : optimizer_sizes)
    for (bool decoupled : {false, true})
      r.run(case_name({decoupled ? "adamw_update" : "adam_update", dt, std::to_string(n)}), false, [&] {
        auto param = r.values(n, -1, 1, dtype);
        Tensor tp = r.upload({n}, param, dtype), tm = Tensor::zeros({n}, dtype, r.device()),
               tv = Tensor::zeros({n}, dtype, r.device());
        std::vector<double> m(n, 0.0), v(n, 0.0);
        auto p = params<kestrel_adam_params>();
        p.lr = 0.01, p.beta1 = 0.9, p.beta2 = 0.999, p.eps = 1e-8, p.weight_decay = 0.05, p.grad_scale = 0.5;
        p.decoupled = decoupled;
        p.zero_grad = decoupled;  // one variant also checks that the gradient is cleared once read
        for (int step = 1; step <= 3; ++step) {
          auto grad = r.values(n, -2, 2, dtype);
          p.step = step;
          Tensor tg = r.upload({n}, grad, dtype);
          launch(r.device(), KESTREL_OP_ADAM_UPDATE, &p, {tp, tg, tm, tv}, {});
          r.expect_close(tg, p.zero_grad ? std::vector<double>(n, 0.0) : grad, Tolerance{0, 0}, "gradient after the update");
          for (int64_t i = 0; i < n; ++i) adam_reference(p, step, grad[i] * p.grad_scale, param[i], m[i], v[i]);
        }
        r.expect_close(tp, param, tolerance_for(dtype, 8), "param");
        r.expect_close(tm, m, tolerance_for(dtype, 8), "m");
        r.expect_close(tv, v, tolerance_for(dtype, 8), "v");
      });
    for (int64_t n : optimizer_sizes)
    for (bool nesterov : {false, true})
      r.run(case_name({"sgd_update", dt, nesterov ? "nesterov" : "momentum", std::to_string(n)}), false, [&] {
        auto param = r.values(n, -1, 1, dtype);
        Tensor tp = r.upload({n}, param, dtype), tb = Tensor::zeros({n}, dtype, r.device());
        std::vector<double> buf(n, 0.0);
        auto p = params<kestrel_sgd_params>();
        p.lr = 0.1, p.momentum = 0.9, p.dampening = 0.0, p.weight_decay = 0.01, p.grad_scale = 1.0;
        p.nesterov = nesterov;
        p.zero_grad = nesterov;
        for (int step = 1; step <= 3; ++step) {
          auto grad = r.values(n, -2, 2, dtype);
          p.first_step = step == 1;
          Tensor tg = r.upload({n}, grad, dtype);
          launch(r.device(), KESTREL_OP_SGD_UPDATE, &p, {tp, tg, tb}, {});
          r.expect_close(tg, p.zero_grad ? std::vector<double>(n, 0.0) : grad, Tolerance{0, 0}, "gradient after the update");
          for (int64_t i = 0; i < n; ++i) {
            double d = grad[i] + p.weight_decay * param[i];
            buf[i] = step == 1 ? d : p.momentum * buf[i] + (1 - p.dampening) * d;
            d = nesterov ? d + p.momentum * buf[i] : buf[i];
            param[i] -= p.lr * d;
          }
        }
        r.expect_close(tp, param, tolerance_for(dtype, 8), "param");
      });
    // Since ABI 1.5: loss scaling's state read from the device, [scale, clean, skipped, found_inf]. Steps 1
    // and 3 of 4 overflowed and change nothing; the others divide the gradient by the scale, count only
    // the updates made (Adam's bias corrections, SGD's first momentum step) and leave the state alone.
    // The state's first entry is any positive divisor: a loss scale (a power of two), or the engine's
    // gradient clipping's 1 / coefficient (times the scale).
    const bool overflowed[] = {true, false, true, false};
    for (double asked : {1024.0, 3.7})
    for (bool adam : {true, false}) {
      const double scale = round_to(DType::f32, asked);  // as the f32 state holds it
      r.run(case_name({adam ? "adam_update" : "sgd_update", dt, asked == 1024.0 ? "loss_scaled" : "divided_by_3.7"}),
            false, [&] {
        const int64_t n = 37;
        auto param = r.values(n, -1, 1, dtype);
        Tensor tp = r.upload({n}, param, dtype), ta = Tensor::zeros({n}, dtype, r.device()),
               tb = Tensor::zeros({n}, dtype, r.device());
        std::vector<double> m(n, 0.0), v(n, 0.0);
        auto pa = params<kestrel_adam_params>();
        pa.lr = 0.01, pa.beta1 = 0.9, pa.beta2 = 0.999, pa.eps = 1e-8, pa.weight_decay = 0.05, pa.grad_scale = 7;
        pa.zero_grad = 1, pa.scaler = 1;
        auto ps = params<kestrel_sgd_params>();
        ps.lr = 0.1, ps.momentum = 0.9, ps.dampening = 0.5, ps.weight_decay = 0.01, ps.grad_scale = 7;
        ps.first_step = 1, ps.scaler = 1;  // first_step must be ignored: step 2 is the first update made
        int64_t skipped = 0;
        for (int step = 1; step <= 4; ++step) {
          const bool skip = overflowed[step - 1];
          const std::vector<double> state{scale, 0, double(skipped), skip ? 1.0 : 0.0};
          Tensor ts = r.upload({4}, state, DType::f32);
          auto grad = r.values(n, -2, 2, dtype);
          for (double& g : grad) g = round_to(dtype, g * scale);
          if (skip) grad[n / 2] = INFINITY;
          Tensor tg = r.upload({n}, grad, dtype);
          pa.step = ps.step = step;
          if (adam)
            launch(r.device(), KESTREL_OP_ADAM_UPDATE, &pa, {tp, tg, ta, tb, ts}, {});
          else
            launch(r.device(), KESTREL_OP_SGD_UPDATE, &ps, {tp, tg, ta, ts}, {});
          r.expect_close(ts, state, Tolerance{0, 0}, "scaler state after the update");
          if (adam) r.expect_close(tg, std::vector<double>(n, 0.0), Tolerance{0, 0}, "gradient after the update");
          if (skip) {
            ++skipped;
            continue;
          }
          const int64_t made = step - skipped;
          for (int64_t i = 0; i < n; ++i) {
            double g = grad[i] / scale;
            if (adam) {
              adam_reference(pa, made, g, param[i], m[i], v[i]);
            } else {
              g += ps.weight_decay * param[i];
              m[i] = made == 1 ? g : ps.momentum * m[i] + (1 - ps.dampening) * g;
              param[i] -= ps.lr * m[i];
            }
          }
        }
        r.expect_close(tp, param, tolerance_for(dtype, 8), "param");
        r.expect_close(ta, m, tolerance_for(dtype, 8), adam ? "m" : "momentum buffer");
        if (adam) r.expect_close(tb, v, tolerance_for(dtype, 8), "v");
      });
    }
  }
}

}  // namespace kestrel::conformance
