// What activation checkpointing trades: the memory a training step holds for backward against the time
// of running checkpointed segments twice. Each workload runs plain and checkpointed side by side on
// every loaded device; the counter activation_MiB is the step's peak allocation above what was allocated
// before it (parameters, gradients, optimizer state, the batch), from the backend's memory statistics.
//
//   build/bin/bench_memory --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <functional>
#include <string>
#include <vector>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/model.h"
#include "kestrel/optim.h"
#include "synthetic_batch.h"

namespace {

using kestrel::Tensor;
using kestrel_bench::batch_for;

struct Workload {
  std::string name;
  std::function<std::string(bool checkpointed)> model;  // the model file's text
  int64_t batch;
};

// 64 blocks of linear 512 + relu (fused: one tensor kept per block); checkpointed in segments of 8
// blocks (the square root of the depth), so 8 segment inputs are kept and one segment's 8 activations
// exist again while it is differentiated: about 64 / 16 = 4x fewer.
std::string deep_mlp(bool checkpointed) {
  std::string layers;
  for (int block = 0; block < 64; ++block) {
    const std::string mark = checkpointed ? fmt::format(R"(, "checkpoint": "s{}")", block / 8) : "";
    layers += fmt::format(R"({{"type": "linear", "out_features": 512{0}}}, {{"type": "relu"{0}}}, )", mark);
  }
  return R"({"name": "deep_mlp", "input": {"shape": [512]}, "layers": [)" + layers +
         R"({"type": "linear", "out_features": 10}]})";
}

// gpt_char's shape with 12 pre-norm causal blocks of width 256 (8 heads, feed-forward 1024, GELU,
// dropout 0.1) over 256 characters; checkpointed block by block.
std::string transformer_12(bool checkpointed) {
  std::string blocks;
  for (int block = 0; block < 12; ++block)
    blocks += fmt::format(R"({{"type": "transformer_encoder_layer", "d_model": 256, "nhead": 8, "dim_feedforward": 1024,
       "dropout": 0.1, "activation": "gelu", "norm_first": true, "causal": true{}}}, )",
                          checkpointed ? R"(, "checkpoint": true)" : "");
  return R"({"name": "transformer_12", "input": {"shape": [256], "dtype": "i64"}, "layers": [
    {"type": "embedding", "num_embeddings": 128, "embedding_dim": 256},
    {"type": "positional_embedding", "max_len": 256, "embedding_dim": 256}, )" +
         blocks + R"({"type": "layernorm", "normalized_shape": 256}, {"type": "linear", "out_features": 128}]})";
}

// Eager steps (every op launched) so that each step allocates and frees its activations as the
// trainer's first step does; Adam's state exists before the measured steps.
void train_step(benchmark::State& state, kestrel::Device device, const Workload& workload, bool checkpointed) {
  kestrel::Engine& engine = kestrel::Engine::global();
  kestrel::Model model(kestrel::ModelSpec::parse(workload.model(checkpointed), workload.name + ".json"), device, 42);
  kestrel::Optimizer adam({kestrel::OptimizerKind::adam, 1e-3}, model.flat_parameters(), model.flat_gradients());
  auto [x, y] = batch_for(model.spec(), workload.batch, device);
  uint64_t rng_offset = 0;
  auto step = [&] {
    model.zero_grad(/*lazy=*/true);
    kestrel::backward(kestrel::fn::cross_entropy(model.forward(x, true, 7, rng_offset), y));
    model.settle_gradients();
    adam.step(1e-3);
    engine.synchronize(device);
  };
  step();  // Adam's moments and library workspaces come into being here
  const uint64_t before = engine.memory_stats(device).allocated;
  engine.reset_peak_memory_stats(device);
  for (auto _ : state) step();
  state.counters["activation_MiB"] = double(engine.memory_stats(device).peak_allocated - before) / (1 << 20);
  state.counters["held_MiB"] = double(before) / (1 << 20);
  state.counters["samples/s"] = benchmark::Counter(double(workload.batch), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  static const Workload workloads[] = {{"deep_mlp", deep_mlp, 512}, {"transformer_12", transformer_12, 8}};
  kestrel::Engine& engine = kestrel::Engine::global();
  for (const auto& plugin : engine.plugins())
    if (plugin.loaded)
      for (const auto& info : plugin.devices) {
        kestrel::Device device = engine.device(fmt::format("{}:{}", plugin.name, info.index));
        for (const Workload& w : workloads)
          for (bool checkpointed : {false, true})
            benchmark::RegisterBenchmark(fmt::format("train_step/{}/{}/{}/b{}", w.name, checkpointed ? "checkpointed" : "plain",
                                                     device.str(), w.batch)
                                             .c_str(),
                                         train_step, device, w, checkpointed)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
      }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
