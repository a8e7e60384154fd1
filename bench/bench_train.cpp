// Training-step benchmarks, registered for every loaded backend device: one full step (lazy zero_grad,
// forward, loss, backward — replayed from a capture where the backend offers it, as the trainer does —
// optimizer update, synchronise) of the seeds' and
// Fashion-MNIST models. Next to them, the GEMMs of the seeds' MLP step called directly in OpenBLAS: the
// floor the CPU step is
// measured against (the non-GEMM work should add little).
//
//   build/bin/bench_train --benchmark_filter=seeds_mlp
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <vector>

#include "blas_direct.h"
#include "synthetic_batch.h"
#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/graph.h"
#include "kestrel/model.h"
#include "kestrel/optim.h"

namespace {

using kestrel::Tensor;
using kestrel_bench::batch_for;

struct Workload {
  const char* name;
  const char* model_file;  // in models/, or with bench_model in bench/models/
  int64_t batch;
  bool bench_model = false;
};

// The sequence models read 128 character ids per sample and are scored at every position.
const Workload workloads[] = {{"seeds_mlp", "seeds_mlp.json", 128},
                              {"fashion_mlp", "fashion_mlp.json", 64},
                              {"fashion_mlp", "fashion_mlp.json", 512},
                              {"fashion_convnet", "convnet.json", 64},
                              {"fashion_convnet", "convnet.json", 512},
                              {"lstm_generator", "lstm_generator.json", 32},
                              {"gpt_char", "gpt_char.json", 32},
                              {"transformer_classifier", "transformer_classifier.json", 32},
                              {"gru_generator", "gru_generator.json", 32, true}};

// One training step as the trainer runs it: captured after a warm-up step and replayed when the
// backend offers capture (`captured`), else (or for the eager variants) every op launched each time.
// `fused` false composes every fused op from primitives (the composed variants).
void train_step(benchmark::State& state, kestrel::Device device, Workload workload, bool captured, bool fused) {
  const kestrel::ops::FusedOpsScope fused_ops(fused);
  kestrel::ModelSpec spec = kestrel::ModelSpec::load(
      std::string(workload.bench_model ? KESTREL_BENCH_MODELS_DIR : KESTREL_MODELS_DIR) + "/" + workload.model_file);
  kestrel::Model model(spec, device, 42);
  kestrel::Optimizer adam({kestrel::OptimizerKind::adam, 1e-3}, model.flat_parameters(), model.flat_gradients());
  auto [x, y] = batch_for(spec, workload.batch, device);
  uint64_t rng_offset = 0;
  auto forward_backward = [&](uint64_t& offset) {
    model.zero_grad(/*lazy=*/true);  // as the trainer does: backward overwrites, no zeroing pass
    kestrel::Var loss = kestrel::fn::cross_entropy(model.forward(x, true, 7, offset), y);
    kestrel::backward(loss);
    model.settle_gradients();
  };
  forward_backward(rng_offset);  // warm-up, as the trainer's first step
  adam.step(1e-3);
  kestrel::CapturedGraph graph;
  Tensor counter_base = Tensor::zeros({}, kestrel::DType::i64, device);
  uint64_t draws = 0;
  if (captured) {
    graph = kestrel::CapturedGraph::capture(device, [&] {
      kestrel::ops::CounterBaseScope scope(counter_base, rng_offset);
      uint64_t offset = rng_offset;
      forward_backward(offset);
      draws = offset - rng_offset;
    });
  }
  // The warm-up's work may still be running on an asynchronous backend; the timed steps start after it,
  // or the first (for slow steps the only) timed iteration pays for two steps.
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    if (graph.valid()) {
      kestrel::ops::fill_(counter_base, double(rng_offset));
      graph.replay();
      rng_offset += draws;
    } else {
      forward_backward(rng_offset);
    }
    adam.step(1e-3);
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["samples/s"] = benchmark::Counter(double(workload.batch), benchmark::Counter::kIsIterationInvariantRate);
  // The optimizer's share of a step's floor (bench/floor.py) follows from how many values it updates.
  state.counters["parameters"] = double(model.flat_parameters().numel());
}

// The eight sgemm calls of one seeds' MLP training step at batch 128 (forward X W^T; backward dY W,
// except for the input layer, and dY^T X), row-major as the engine issues them: each weight gradient
// into its own buffer with beta = 0 (the engine's backward overwrites last step's gradients).
void seeds_mlp_gemms_openblas(benchmark::State& state) {
  const int batch = 128;
  const int sizes[] = {1024, 2048, 512, 10};
  const kestrel_bench::SgemmFn sgemm = kestrel_bench::direct_sgemm();
  std::vector<std::vector<float>> weights, weight_grads, activations, grads;
  for (int l = 0; l < 3; ++l) {
    weights.emplace_back(size_t(sizes[l]) * sizes[l + 1], 0.01f);
    weight_grads.emplace_back(size_t(sizes[l]) * sizes[l + 1]);
  }
  for (int l = 0; l < 4; ++l) {
    activations.emplace_back(size_t(batch) * sizes[l], 0.5f);
    grads.emplace_back(size_t(batch) * sizes[l], 0.25f);
  }
  for (auto _ : state) {
    for (int l = 0; l < 3; ++l)  // Y (B, out) = X (B, in) @ W^T, W stored (out, in)
      sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, sizes[l + 1], sizes[l], 1.0f, activations[l].data(),
            sizes[l], weights[l].data(), sizes[l], 0.0f, activations[l + 1].data(), sizes[l + 1]);
    for (int l = 2; l >= 0; --l) {
      if (l > 0)  // dX (B, in) = dY (B, out) @ W (out, in)
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, sizes[l], sizes[l + 1], 1.0f, grads[l + 1].data(),
              sizes[l + 1], weights[l].data(), sizes[l], 0.0f, grads[l].data(), sizes[l]);
      // dW (out, in) = dY^T (out, B) @ X (B, in)
      sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sizes[l + 1], sizes[l], batch, 1.0f, grads[l + 1].data(),
            sizes[l + 1], activations[l].data(), sizes[l], 0.0f, weight_grads[l].data(), sizes[l]);
      benchmark::DoNotOptimize(weight_grads[l].data());
    }
  }
  state.counters["samples/s"] = benchmark::Counter(double(batch), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RegisterBenchmark("train_step/seeds_mlp/gemms-only-openblas/b128", seeds_mlp_gemms_openblas)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  kestrel::Engine& engine = kestrel::Engine::global();
  for (const auto& plugin : engine.plugins())
    if (plugin.loaded)
      for (const auto& info : plugin.devices) {
        kestrel::Device device = engine.device(fmt::format("{}:{}", plugin.name, info.index));
        const bool captures = kestrel::CapturedGraph::supported(device);
        for (const Workload& w : workloads) {
          benchmark::RegisterBenchmark(fmt::format("train_step/{}/{}/b{}", w.name, device.str(), w.batch).c_str(),
                                       train_step, device, w, captures, true)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
          // What capture saves, side by side (the seeds' MLP only, to keep the suite short).
          if (captures && std::string(w.name) == "seeds_mlp")
            benchmark::RegisterBenchmark(fmt::format("train_step_eager/{}/{}/b{}", w.name, device.str(), w.batch).c_str(),
                                         train_step, device, w, false, true)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
          // What the fused ops save, side by side: attention with a key-padding mask (plugin ABI 1.9),
          // the recurrent cells (LSTM 1.7, GRU 1.9) and the convolutions (1.10).
          if (std::string(w.name) == "transformer_classifier" || std::string(w.name) == "gru_generator" ||
              std::string(w.name) == "lstm_generator" || std::string(w.name) == "fashion_convnet")
            benchmark::RegisterBenchmark(fmt::format("train_step_composed/{}/{}/b{}", w.name, device.str(), w.batch).c_str(),
                                         train_step, device, w, captures, false)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
      }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
