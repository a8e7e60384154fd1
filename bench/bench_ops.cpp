// Op benchmarks through the plugin ABI, registered at run time for every loaded backend and device,
// next to OpenBLAS called directly, so the cost of the engine + ABI layers shows as a ratio.
//
//   build/bin/bench_ops --benchmark_filter=gemm
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>

#include <string>
#include <tuple>
#include <vector>

#include "blas_direct.h"
#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/ops.h"
#include "kestrel/optim.h"
#include "kestrel/plugin_struct_size.hpp"

namespace {

using kestrel::DType;
using kestrel::Tensor;

// Drawn in f32 and cast: a device may compute in a dtype without drawing random numbers in it.
Tensor random_tensor(const kestrel::Shape& shape, DType dtype, const kestrel::Device& device, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  kestrel::ops::random_(t, KESTREL_DISTRIBUTION_UNIFORM, seed, 0, -1, 1);
  return dtype == DType::f32 ? t : t.to(dtype);
}

void gemm_through_plugin(benchmark::State& state, kestrel::Device device, DType dtype, int64_t n) {
  Tensor a = random_tensor({n, n}, dtype, device, 1), b = random_tensor({n, n}, dtype, device, 2);
  Tensor c = Tensor::empty({n, n}, dtype, device);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    kestrel::ops::gemm_(c, a, b);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// The baseline: the same sgemm straight into the BLAS library the CPU plugin uses.
void gemm_openblas(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  const kestrel_bench::SgemmFn sgemm = kestrel_bench::direct_sgemm();
  for (auto _ : state) {
    sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// An LSTM step's hidden product at lstm_generator's shape: h (32, 256) @ W_hh^T, W_hh (1024, 256) seen
// transposed, as the layer's sequence node multiplies it (the CPU plugin splits it into column halves).
constexpr int kStepBatch = 32, kStepHidden = 256, kStepGates = 1024;

void lstm_step_gemm(benchmark::State& state, kestrel::Device device) {
  Tensor h = random_tensor({kStepBatch, kStepHidden}, DType::f32, device, 9);
  Tensor w = random_tensor({kStepGates, kStepHidden}, DType::f32, device, 10);
  Tensor c = Tensor::empty({kStepBatch, kStepGates}, DType::f32, device);
  const Tensor w_t = w.transpose(0, 1);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    kestrel::ops::gemm_(c, h, w_t);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kStepBatch * kStepHidden * kStepGates,
                                                 benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// h (m, k) @ W^T, W (n, k), straight into the BLAS library on one of its threads: whole, or in pieces of
// `piece` columns as the CPU plugin runs a narrow product (ops_gemm.cpp; 2026-11-27-vm-cpu-lstm-step-pieces.md).
// At (32, 1024, 256), whole, it is the baseline of the LSTM step's product, as the plugin ran it before the halves.
void narrow_product_openblas_one_thread(benchmark::State& state, int m, int n, int k, int piece) {
  std::vector<float> h(size_t(m) * k, 0.5f), w(size_t(n) * k, 0.25f), c(size_t(m) * n);
  const kestrel_bench::SgemmFn sgemm = kestrel_bench::direct_sgemm();
  // One OpenBLAS thread while it runs; the count the plugin expects afterwards.
  auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const int threads = get_threads ? get_threads() : 1;
  if (set_threads) set_threads(1);
  for (auto _ : state) {
    for (int column = 0; column < n; column += piece)
      sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, std::min(piece, n - column), k, 1.0f, h.data(), k,
            w.data() + size_t(column) * k, k, 0.0f, c.data() + column, n);
    benchmark::DoNotOptimize(c.data());
  }
  if (set_threads) set_threads(threads);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void elementwise(benchmark::State& state, kestrel::Device device, DType dtype, int64_t n, bool binary) {
  Tensor a = random_tensor({n}, dtype, device, 3), b = random_tensor({n}, dtype, device, 4);
  Tensor out = Tensor::empty({n}, dtype, device);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    if (binary)
      kestrel::ops::binary_(KESTREL_BINARY_ADD, out, a, b);
    else
      out = kestrel::ops::unary(KESTREL_UNARY_RELU, a);
    kestrel::Engine::global().synchronize(device);
  }
  double bytes = double(n) * kestrel::dtype_size(dtype) * (binary ? 3 : 2);
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1024);
}

// An f32 tensor cast to bf16, as autocast's edges do (CUDA: the packed kernels, or with
// KESTREL_CUDA_GENERIC_ELEMENTWISE=1 the strided ones).
void cast_to_bf16(benchmark::State& state, kestrel::Device device, int64_t n) {
  Tensor a = random_tensor({n}, DType::f32, device, 5);
  Tensor out = Tensor::empty({n}, DType::bf16, device);
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    kestrel::ops::copy_(out, a);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GB/s"] = benchmark::Counter(double(n) * 6, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1024);
}

// The element-wise work beside a Transformer step's products, at gpt_char's shapes (batch 32, 4 heads,
// 128 positions): GELU and its gradient over the feed-forward activations (4096 x 512) (the derivative
// alone, dy times it in one pass, and the two composed), a dropout mask
// and softmax over the attention weights (16384 rows of 128).
void sequence_op(benchmark::State& state, kestrel::Device device, const std::string& op, int64_t rows, int64_t cols) {
  Tensor x = random_tensor({rows, cols}, DType::f32, device, 8);
  Tensor out = Tensor::empty({rows, cols}, DType::f32, device);
  uint64_t offset = 0;
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    if (op == "gelu")
      out = kestrel::ops::unary(KESTREL_UNARY_GELU, x);
    else if (op == "gelu_grad")
      out = kestrel::ops::unary(KESTREL_UNARY_GELU_GRAD, x);
    else if (op == "gelu_backward")  // dy * gelu'(x) in one pass (ABI 1.14), x standing in for dy
      out = kestrel::ops::binary(KESTREL_BINARY_GELU_BACKWARD, x, x);
    else if (op == "gelu_grad_then_mul")  // the same composed, as before 1.14
      out = kestrel::ops::binary(KESTREL_BINARY_MUL, x, kestrel::ops::unary(KESTREL_UNARY_GELU_GRAD, x));
    else if (op == "dropout_mask")
      kestrel::ops::random_(out, KESTREL_DISTRIBUTION_BERNOULLI, 9, offset += uint64_t(rows * cols), 0.9, 0.0);
    else
      out = kestrel::fn::softmax(kestrel::Var(x)).value();
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["elements/s"] = benchmark::Counter(double(rows) * cols, benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1000);
}

// An embedding's gradient: (rows, cols) gradient rows added into a (vocabulary, cols) table at each row's
// token, the index a stride-0 view of the ids as the engine makes it (lstm_generator's fold: 4096 tokens,
// 1024 gates, 128 characters).
void embedding_grad(benchmark::State& state, kestrel::Device device, int64_t rows, int64_t cols, int64_t vocabulary) {
  std::vector<int64_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) ids[size_t(r)] = (r * 7919) % vocabulary;
  const Tensor index = Tensor::from_vector(ids, {rows, 1}, device).expand({rows, cols});  // (rows, cols)
  const Tensor src = random_tensor({rows, cols}, DType::f32, device, 11);                 // (rows, cols)
  Tensor table = Tensor::zeros({vocabulary, cols}, DType::f32, device);                    // (vocabulary, cols)
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    kestrel::ops::scatter_add_(table, 0, index, src);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GB/s"] = benchmark::Counter(double(rows) * cols * 4, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1024);
}

// Sums over `axis` of a (rows, cols) matrix: 1 for each row's sum, 0 for the column sums a linear layer's
// bias gradient is.
void reduce_sum(benchmark::State& state, kestrel::Device device, DType dtype, int64_t rows, int64_t cols, int axis) {
  Tensor a = random_tensor({rows, cols}, dtype, device, 5);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    Tensor s = kestrel::ops::reduce(KESTREL_REDUCE_SUM, a, {axis});
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GB/s"] = benchmark::Counter(double(rows) * cols * kestrel::dtype_size(dtype),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

// A linear layer's weight and bias gradients from dz (tokens, out) and x (tokens, in), bf16 or f32, both
// gradients f32 as mixed precision keeps them: dW = dz^T x by one product and db = dz summed over the tokens, either
// in that product's launch (ABI 1.14's GEMM row sums: cuBLASLt's BGRADB epilogue) or as a column fold after
// it (`separate`), the two ways a step can take.
void weight_and_bias_grad(benchmark::State& state, kestrel::Device device, DType dtype, int64_t tokens, int64_t in,
                          int64_t out, bool separate) {
  const Tensor dz = random_tensor({tokens, out}, dtype, device, 7), x = random_tensor({tokens, in}, dtype, device, 8);
  Tensor dw = Tensor::empty({out, in}, DType::f32, device), db = Tensor::empty({out}, DType::f32, device);
  const Tensor dzt = dz.transpose(0, 1);  // (out, tokens)
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    if (separate) {
      kestrel::ops::gemm_(dw, dzt, x);
      Tensor sums = kestrel::ops::reduce(KESTREL_REDUCE_SUM, dz, {0});  // (out) bf16
      db.copy_from(sums);
    } else {
      kestrel::ops::gemm_with_row_sums_(dw, db, dzt, x);
    }
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * tokens * in * out / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// GPT-2 small's language-model loss at batch 8 x 1024: bf16 logits (8192, 50257) left in the rows of
// 50264 that their padded product wrote, cross-entropy forward and backward as a training step runs them
// (GB/s counts the logits read five times and their gradient written once).
void lm_loss(benchmark::State& state, kestrel::Device device) {
  const int64_t rows = 8192, classes = 50257, width = 50264;
  const Tensor logits = random_tensor({rows, width}, DType::bf16, device, 6).slice(1, 0, classes);
  std::vector<int64_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r) ids[size_t(r)] = (r * 7919) % classes;
  const Tensor labels = Tensor::from_vector(ids, {rows}, device);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    kestrel::Var x(logits, true);
    kestrel::backward(kestrel::fn::cross_entropy(x, labels));
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GB/s"] = benchmark::Counter(double(rows) * classes * 2 * 6, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1024);
}

// GPT-2 small's pre-norm layer norm at batch 8 x 1024 (8192 rows of 768, f32 with its weight and bias),
// forward and backward under bf16 autocast as its blocks run it: writing the bf16 rows the next product
// reads itself (`lowered`, ABI 1.15) or f32 rows then cast, the gradient arriving in bf16 either way.
void layer_norm(benchmark::State& state, kestrel::Device device, bool lowered) {
  const Tensor x = random_tensor({8192, 768}, DType::f32, device, 3), w = random_tensor({768}, DType::f32, device, 4),
               b = random_tensor({768}, DType::f32, device, 5), seed = random_tensor({8192, 768}, DType::bf16, device, 6);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    kestrel::Var input(x, true), weight(w, true), bias(b, true);
    kestrel::fn::AutocastScope autocast(DType::bf16);
    const kestrel::Var y = lowered ? kestrel::fn::layer_norm(input, weight, bias, 1, 1e-5, true)
                                   : kestrel::fn::cast(kestrel::fn::layer_norm(input, weight, bias, 1, 1e-5), DType::bf16);
    kestrel::backward(y, seed);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["rows/s"] = benchmark::Counter(8192, benchmark::Counter::kIsIterationInvariantRate);
}

// A pre-norm block's norm backward at GPT-2 small's rows (8192 x 768, f32), its dx joining the residual
// stream's gradient: added in the same pass (ABI 1.16) or by a separate ADD after it, as before.
void norm_into_residual(benchmark::State& state, kestrel::Device device, bool adds) {
  const Tensor x = random_tensor({8192, 768}, DType::f32, device, 3), w = random_tensor({768}, DType::f32, device, 4),
               dy = random_tensor({8192, 768}, DType::f32, device, 6),
               residual = random_tensor({8192, 768}, DType::f32, device, 7);  // the skip's gradient
  Tensor y = Tensor::empty({8192, 768}, DType::f32, device), mean = Tensor::empty({8192}, DType::f32, device),
         rstd = Tensor::empty({8192}, DType::f32, device);
  const kestrel_layer_norm_params params{kestrel::abi_size<kestrel_layer_norm_params>, 1e-5};
  kestrel::ops::launch(device, kestrel::ops::make_op(KESTREL_OP_LAYER_NORM, &params, {x, w}, {y, mean, rstd}));
  Tensor dx = Tensor::empty({8192, 768}, DType::f32, device), sum = Tensor::empty({8192, 768}, DType::f32, device);
  Tensor dw = Tensor::empty({768}, DType::f32, device);
  std::vector<Tensor> inputs{dy, x, mean, rstd, w};
  if (adds) inputs.push_back(residual);
  const kestrel_op backward =
      kestrel::ops::make_op(KESTREL_OP_LAYER_NORM_BACKWARD, &params, inputs, {adds ? sum : dx, dw});
  if (!kestrel::ops::supports(device, backward))
    return state.SkipWithError(adds ? "the device does not add into the gradient in its norm's backward"
                                    : "the device has no fused layer norm backward");
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    kestrel::ops::launch(device, backward);
    if (!adds) kestrel::ops::binary_(KESTREL_BINARY_ADD, sum, dx, residual);
    kestrel::Engine::global().synchronize(device);
  }
}

// f16 loss scaling's overflow check reads every gradient: one MAX_ABS reduction (ABI 1.11) or, on a plugin
// without it, a max and a min. Both over the seeds' MLP's 3.15M flat gradients, side by side.
void overflow_check(benchmark::State& state, kestrel::Device device, std::vector<kestrel_reduce_fn> fns, int64_t n) {
  Tensor gradients = random_tensor({n}, DType::f32, device, 8);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  try {
    for (auto _ : state) {
      for (kestrel_reduce_fn fn : fns) benchmark::DoNotOptimize(kestrel::ops::reduce(fn, gradients));
      kestrel::Engine::global().synchronize(device);
    }
  } catch (const kestrel::Unsupported& e) {  // a plugin built before ABI 1.11 has no MAX_ABS
    state.SkipWithError(e.what());
    return;
  }
  state.counters["GB/s"] = benchmark::Counter(double(n) * 4 * double(fns.size()),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

// Attention at gpt_char's shape: (B, T, D) = (128, 128, 32), its 32 samples x 4 heads of 128 causal
// positions and 32 features a head, dropout 0.1 on the weights as in training; forward alone, or forward
// and backward (the fused op where the device has it).
void attention(benchmark::State& state, kestrel::Device device, bool backward) {
  const Tensor q = random_tensor({128, 128, 32}, DType::f32, device, 21), k = random_tensor({128, 128, 32}, DType::f32, device, 22),
               v = random_tensor({128, 128, 32}, DType::f32, device, 23);  // (B, T, D) each
  const Tensor dy = random_tensor({128, 128, 32}, DType::f32, device, 24);
  kestrel::fn::AttentionOptions options;
  options.causal = true;
  options.dropout = 0.1;
  options.training = true;
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    kestrel::Var qv(q, backward), kv(k, backward), vv(v, backward);
    const kestrel::Var out = kestrel::fn::scaled_dot_product_attention(qv, kv, vv, options);
    if (backward) kestrel::backward(kestrel::fn::sum(kestrel::fn::mul(out, kestrel::Var(dy))));
    kestrel::Engine::global().synchronize(device);
    ++options.offset;
  }
}

// Gradient clipping's squared norm over the seeds' MLP's 3.15M flat gradients: one SUM_SQUARES reduction
// (ABI 1.17), or squares written and then summed (fused ops off, as on a plugin without it), side by side.
void squared_norm(benchmark::State& state, kestrel::Device device, bool one_pass, int64_t n) {
  Tensor gradients = random_tensor({n}, DType::f32, device, 8);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  const kestrel::ops::FusedOpsScope fused_ops(one_pass);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kestrel::ops::sum_of_squares(gradients));
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GB/s"] = benchmark::Counter(double(n) * 4, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1024);  // the gradients, read once
}

// The fused Adam update over the seeds' MLP's 3.15M parameters: memory-bound where it is vectorised (it reads
// parameters, gradients and both moments and writes three of them back: 28 bytes per f32 parameter).
void adam_update(benchmark::State& state, kestrel::Device device, int64_t n) {
  Tensor params = random_tensor({n}, DType::f32, device, 6), grads = random_tensor({n}, DType::f32, device, 7);
  kestrel::Optimizer adam({kestrel::OptimizerKind::adam, 1e-3}, params, grads);
  kestrel::Engine::global().synchronize(device);  // the inputs' generation is not timed
  for (auto _ : state) {
    adam.step(1e-3);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["GB/s"] = benchmark::Counter(double(n) * 28, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1024);
}

// The fused LSTM cell at lstm_generator's step shape (batch 32, hidden 256), forward or backward: a
// step's gate math after its two products, launched 256 times a training step each way. Over `steps`
// time steps, each launch the next step's slice of (N, T, .) tensors as in the layer, rows T apart: at
// 128 steps they outgrow the caches, and each step's rows come from memory as in a training step.
void lstm_cell(benchmark::State& state, kestrel::Device device, bool backward, int64_t steps) {
  constexpr int64_t batch = 32, hidden = 256;
  auto sequence = [&](int64_t width, uint64_t seed) {  // (N, T, width)
    return random_tensor({batch, steps, width}, DType::f32, device, seed);
  };
  const Tensor projected = sequence(4 * hidden, 10), cells_before = sequence(hidden, 12);
  const Tensor recurrent = random_tensor({batch, 4 * hidden}, DType::f32, device, 11);  // (N, 4H)
  Tensor outputs = sequence(hidden, 13), cells = sequence(hidden, 14), gates = sequence(4 * hidden, 15),
         dgates = sequence(4 * hidden, 16);
  const Tensor dc_next = random_tensor({batch, hidden}, DType::f32, device, 17);  // (N, H)
  Tensor dc = Tensor::empty({batch, hidden}, DType::f32, device);                  // (N, H)
  auto op_at = [&](int64_t t) {
    if (backward)
      return kestrel::ops::make_op(KESTREL_OP_LSTM_CELL_BACKWARD, nullptr,
                                   {outputs.select(1, t), dc_next, gates.select(1, t), cells_before.select(1, t),
                                    cells.select(1, t)},
                                   {dgates.select(1, t), dc});
    return kestrel::ops::make_op(KESTREL_OP_LSTM_CELL, nullptr,
                                 {projected.select(1, t), recurrent, cells_before.select(1, t)},
                                 {outputs.select(1, t), cells.select(1, t), gates.select(1, t)});
  };
  kestrel::Engine::global().synchronize(device);
  int64_t t = 0;
  for (auto _ : state) {
    kestrel::ops::launch(device, op_at(t));
    kestrel::Engine::global().synchronize(device);
    t = (t + 1) % steps;
  }
}

// The ConvNet's first max pooling: 2 x 2 windows of stride 2 over (batch, 32, 28, 28) images, the
// pooled values and each window's argmax.
void pool_forward(benchmark::State& state, kestrel::Device device, int64_t batch) {
  const kestrel::ops::Window window{2, 2, 2, 2, 0, 0, 1, 1};
  const Tensor x = random_tensor({batch, 32, 28, 28}, DType::f32, device, 8);  // (N, C, H, W)
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    const kestrel::ops::PoolResult pooled = kestrel::ops::pool2d(x, window, KESTREL_POOL_MAX);
    kestrel::Engine::global().synchronize(device);
  }
}

// Its backward: the gradient of every element of x from the pooled outputs' gradients and their argmax.
void pool_backward(benchmark::State& state, kestrel::Device device, int64_t batch) {
  const kestrel::ops::Window window{2, 2, 2, 2, 0, 0, 1, 1};
  const Tensor x = random_tensor({batch, 32, 28, 28}, DType::f32, device, 8);  // (N, C, H, W)
  const kestrel::ops::PoolResult pooled = kestrel::ops::pool2d(x, window, KESTREL_POOL_MAX);
  const Tensor dy = random_tensor(pooled.out.shape(), DType::f32, device, 9);  // (N, C, 14, 14)
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    Tensor dx = kestrel::ops::pool2d_backward(dy, pooled.indices, window, KESTREL_POOL_MAX, x.shape());
    kestrel::Engine::global().synchronize(device);
  }
}

void register_device_benchmarks(const kestrel::Device& device) {
  std::string d = device.str();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    // Register only what the device runs: a probe op decides.
    try {
      Tensor probe = Tensor::zeros({2, 2}, dtype, device);
      kestrel::ops::gemm_(probe, probe, probe);
    } catch (const kestrel::Error&) {
      continue;
    }
    for (int64_t n : {256, 1024})
      benchmark::RegisterBenchmark(fmt::format("gemm/{}/{}/{}", d, kestrel::dtype_name(dtype), n).c_str(),
                                   gemm_through_plugin, device, dtype, n)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  }
  benchmark::RegisterBenchmark(fmt::format("gemm_lstm_step/{}/f32/32x256x1024", d).c_str(), lstm_step_gemm, device)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  // 2^26 elements: the 8192-wide MLP's activations, past a GPU's cache.
  for (int64_t n : {int64_t(1) << 16, int64_t(1) << 26}) {
    benchmark::RegisterBenchmark(fmt::format("cast/{}/f32-bf16/{}", d, n).c_str(), cast_to_bf16, device, n)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("add/{}/bf16/{}", d, n).c_str(), elementwise, device, DType::bf16, n, true)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  for (int64_t n : {1 << 8, 1 << 16, 1 << 22}) {
    benchmark::RegisterBenchmark(fmt::format("add/{}/f32/{}", d, n).c_str(), elementwise, device, DType::f32, n, true)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("relu/{}/f32/{}", d, n).c_str(), elementwise, device, DType::f32, n, false)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  for (const auto& [op, rows, cols] : {std::tuple<std::string, int64_t, int64_t>{"gelu", 4096, 512},
                                       {"gelu_grad", 4096, 512}, {"gelu_backward", 4096, 512},
                                       {"gelu_grad_then_mul", 4096, 512}, {"dropout_mask", 16384, 128},
                                       {"softmax", 16384, 128}})
    benchmark::RegisterBenchmark(fmt::format("{}/{}/f32/{}x{}", op, d, rows, cols).c_str(), sequence_op, device, op, rows,
                                 cols)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark(fmt::format("sum_rows/{}/f32/4096x1024", d).c_str(), reduce_sum, device, DType::f32,
                               4096, 1024, 1)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(fmt::format("embedding_grad/{}/f32/4096x1024/into128", d).c_str(), embedding_grad, device,
                               4096, 1024, 128)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(fmt::format("sum_columns/{}/f32/4096x1024", d).c_str(), reduce_sum, device, DType::f32,
                               4096, 1024, 0)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  // gpt_char's feed-forward layer at batch 32 x 128 (128 -> 512), f32.
  for (bool separate : {false, true})
    benchmark::RegisterBenchmark(fmt::format("weight_and_bias_grad/{}/f32/4096x128x512/{}", d,
                                             separate ? "separate" : "one_launch").c_str(),
                                 weight_and_bias_grad, device, DType::f32, 4096, 128, 512, separate)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  // GPU-sized: the 8192-wide MLP's bias gradient (a bf16 column fold) and GPT-2's loss.
  const std::string kind = kestrel::Engine::global().properties(device).kind;
  if (kind != "cpu" && kind != "software") {
    benchmark::RegisterBenchmark(fmt::format("sum_columns/{}/bf16/8192x8192", d).c_str(), reduce_sum, device, DType::bf16,
                                 8192, 8192, 0)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("lm_loss/{}/bf16/8192x50257/padded", d).c_str(), lm_loss, device)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    for (bool lowered : {true, false})
      benchmark::RegisterBenchmark(fmt::format("layer_norm/{}/f32/8192x768/{}", d, lowered ? "bf16_rows" : "f32_rows_cast").c_str(),
                                   layer_norm, device, lowered)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    // GPT-2 small's feed-forward layers at batch 8 x 1024 (768 -> 3072 and back).
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{768, 3072}, {3072, 768}})
      for (bool separate : {false, true})
        benchmark::RegisterBenchmark(fmt::format("weight_and_bias_grad/{}/bf16/8192x{}x{}/{}", d, in, out,
                                                 separate ? "separate" : "one_launch").c_str(),
                                     weight_and_bias_grad, device, DType::bf16, 8192, in, out, separate)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
  }
  for (const auto& [name, fns] : {std::pair<const char*, std::vector<kestrel_reduce_fn>>{"max_abs", {KESTREL_REDUCE_MAX_ABS}},
                                  {"max_and_min", {KESTREL_REDUCE_MAX, KESTREL_REDUCE_MIN}}})
    benchmark::RegisterBenchmark(fmt::format("overflow_check/{}/f32/3150346/{}", d, name).c_str(), overflow_check, device,
                                 fns, 3150346)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  for (bool adds : {true, false})
    benchmark::RegisterBenchmark(fmt::format("norm_into_residual/{}/f32/8192x768/{}", d, adds ? "adds" : "then_add").c_str(),
                                 norm_into_residual, device, adds)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  for (bool backward : {false, true})
    benchmark::RegisterBenchmark(fmt::format("attention{}/{}/f32/128x128x32/causal_dropout", backward ? "_with_backward" : "", d).c_str(),
                                 attention, device, backward)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  for (bool one_pass : {true, false})
    benchmark::RegisterBenchmark(fmt::format("squared_norm/{}/f32/3150346/{}", d, one_pass ? "one_pass" : "square_then_sum").c_str(),
                                 squared_norm, device, one_pass, 3150346)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark(fmt::format("adam_update/{}/f32/3150346", d).c_str(), adam_update, device, 3150346)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  for (bool backward : {false, true}) {
    // Only where the device has the fused cell.
    try {
      Tensor probe = Tensor::zeros({1, 4}, DType::f32, device), c = Tensor::zeros({1, 1}, DType::f32, device);
      if (!kestrel::ops::supports(device, kestrel::ops::make_op(KESTREL_OP_LSTM_CELL, nullptr, {probe, probe, c},
                                                                {c, c, probe})))
        break;
    } catch (const kestrel::Error&) {
      break;
    }
    for (int64_t steps : {1, 128})
      benchmark::RegisterBenchmark(
          fmt::format("lstm_cell{}/{}/f32/32x{}x256", backward ? "_backward" : "", d, steps).c_str(), lstm_cell,
          device, backward, steps)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  }
  for (int64_t batch : {64, 512}) {
    benchmark::RegisterBenchmark(fmt::format("pool2d/{}/f32/{}x32x28x28", d, batch).c_str(), pool_forward, device,
                                 batch)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("pool2d_backward/{}/f32/{}x32x28x28", d, batch).c_str(), pool_backward,
                                 device, batch)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int64_t n : {256, 1024})
    benchmark::RegisterBenchmark("gemm/openblas-direct/f32", gemm_openblas)->Arg(n)->Unit(benchmark::kMicrosecond)->UseRealTime();
  kestrel::Engine& engine = kestrel::Engine::global();
  benchmark::RegisterBenchmark("gemm_lstm_step/openblas-direct-1-thread/f32/32x256x1024",
                               narrow_product_openblas_one_thread, kStepBatch, kStepGates, kStepHidden, kStepGates)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  // Half an LSTM step's gates (as each of the plugin's two threads computes them), whole and in 32 columns.
  for (auto [m, k] : {std::pair{4, 1024}, {8, 1024}, {16, 256}, {32, 256}, {32, 512}, {64, 256}, {128, 256}})
    for (int piece : {512, 32})
      benchmark::RegisterBenchmark(fmt::format("narrow_product/openblas-direct-1-thread/f32/{}x512x{}/pieces{}", m, k,
                                               piece).c_str(),
                                   narrow_product_openblas_one_thread, m, 512, k, piece)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  for (const auto& plugin : engine.plugins())
    if (plugin.loaded)
      for (const auto& info : plugin.devices)
        register_device_benchmarks(engine.device(fmt::format("{}:{}", plugin.name, info.index)));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
