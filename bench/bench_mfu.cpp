// Model-FLOPs utilisation on a GPU: the training step the trainer runs (TrainStep: captured forward and
// backward, Adam, and for f16 the device-side loss scaler) of a GEMM-bound 8192-wide MLP and of GPT-2
// small's shape, in f32, bf16 and f16, with the achieved TFLOP/s and their fraction of the H100's dense
// bf16 peak. Beside them, what f16's loss scaling alone costs (seed, overflow check and scale update
// over the model's gradients), to set against the f16 step. bench/pytorch/mfu.py times the same shapes
// in PyTorch (AMP eager and whole-step torch.compile); bench/mfu.py runs both and writes the record.
//
//   build/bin/bench_mfu --benchmark_filter=gpt2_small/cuda:0/bf16/b8/captured
//
// Each step runs captured (as the trainer runs it) and eager, and eagerly as one rank of a data-parallel
// run of one process (an NCCL communicator of one; such steps are not captured): the third against the
// second is what data parallelism's bucketed gradient sums add to a step (issue 17's target: at most 3%).
// Registered for CUDA devices, and for Vulkan on a GPU the MLP alone, captured, in f32 and f16 (issue 18:
// Vulkan's products against CUDA's on the same device; f16 on cooperative matrices where the device
// offers them, KESTREL_VULKAN_DISABLE_COOPMAT=1 for the scalar shader). Not on a CPU or a software device:
// one GPT-2 step takes minutes there and its utilisation means nothing against a GPU's peak.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "synthetic_batch.h"
#include "kestrel/config.h"
#include "kestrel/distributed.h"
#include "kestrel/engine.h"
#include "kestrel/model.h"
#include "kestrel/optim.h"
#include "train/grad_scaler.h"
#include "train/metrics_window.h"
#include "train/train_step.h"

namespace {

using kestrel::DType;

// NVIDIA's figure for the H100 SXM: dense bf16/f16 tensor-core products with f32 accumulation.
constexpr double kPeakBf16Flops = 989.4e12;

struct Workload {
  const char* name;
  const char* model_file;
  int64_t batch;
  double flops_per_step;  // the products of forward and backward (6 x multiply-adds of the weights per sample)
};

constexpr double mlp_flops(double batch, double width, double layers) { return 6 * batch * layers * width * width; }

// GPT-2's accounting (PaLM's appendix B): 6 FLOPs per weight of every product per token (the twelve
// blocks' 12 d^2 and the output layer's d x vocab; the embedding lookups are no products), plus 12 L T d
// per token for the attention scores and their weighted sum, causal masking not subtracted.
constexpr double gpt_flops(double batch, double context, double layers, double width, double vocab) {
  const double tokens = batch * context;
  const double weights = layers * 12 * width * width + width * vocab;
  return tokens * (6 * weights + 12 * layers * context * width);
}

const Workload workloads[] = {{"mlp_8192", "mlp_8192.json", 8192, mlp_flops(8192, 8192, 4)},
                              {"gpt2_small", "gpt2_small.json", 8, gpt_flops(8, 1024, 12, 768, 50257)}};

kestrel::RunConfig run_config(DType precision, int64_t batch) {
  kestrel::RunConfig config;
  config.precision = precision;
  config.batch_size = batch;
  config.optimizer = {kestrel::OptimizerKind::adam, 1e-4};
  return config;
}

// Warm-up steps (the first is eager and the capture follows it), then timed steps, each synchronised.
enum class Mode { captured, eager, data_parallel };
const char* mode_name(Mode mode) {
  return mode == Mode::captured ? "captured" : mode == Mode::eager ? "eager" : "eager_nccl1";
}

// captured: replayed from a capture, as the trainer does; eager: every op launched each step;
// data_parallel: eager, with the gradients summed over a communicator of this one process. Counters:
// the step's model TFLOP/s, its MFU, and the peak of allocated device memory (GiB).
void train_step_or_fail(benchmark::State& state, kestrel::Device device, Workload workload, DType precision,
                        Mode mode) {
  kestrel::Engine& engine = kestrel::Engine::global();
  engine.empty_cache(device);  // what earlier benchmarks left cached would count against this one
  engine.reset_peak_memory_stats(device);
  const auto spec = kestrel::ModelSpec::load(std::string(KESTREL_BENCH_MODELS_DIR) + "/" + workload.model_file);
  kestrel::Model model(spec, device, 42);
  kestrel::RunConfig config = run_config(precision, workload.batch);
  config.capture = mode == Mode::captured;
  kestrel::Optimizer adam(config.optimizer, model.flat_parameters(), model.flat_gradients());
  const int64_t labels = spec.input_dtype() == DType::i64 ? spec.input_shape()[0] : 1;
  kestrel::MetricsWindow metrics(device, labels, {}, 0);
  kestrel::LossScaleState loss_scale;
  std::unique_ptr<kestrel::ProcessGroup> group;
  if (mode == Mode::data_parallel) group = std::make_unique<kestrel::ProcessGroup>(device, kestrel::World::get(), 60.0);
  kestrel::TrainStep step(config, model, adam, metrics, [](const std::string&) {}, loss_scale, group.get());
  auto [x, y] = kestrel_bench::batch_for(spec, workload.batch, device);
  const kestrel::data::Batch batch{x, y, 0, workload.batch, workload.batch};
  uint64_t rng_offset = 0;
  int64_t steps = 0;
  for (int i = 0; i < 3; ++i) step.run(batch, 1e-4, rng_offset, ++steps);
  engine.synchronize(device);
  for (auto _ : state) {
    step.run(batch, 1e-4, rng_offset, ++steps);
    engine.synchronize(device);
  }
  step.read_loss_scale();
  state.counters["TFLOP/s"] = benchmark::Counter(workload.flops_per_step / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MFU"] = benchmark::Counter(workload.flops_per_step / kPeakBf16Flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["replayed"] = double(step.replayed());
  state.counters["peak_GiB"] = double(engine.memory_stats(device).peak_allocated) / (1 << 30);
  // The device's own figure too: a captured graph's memory is the driver's, outside Kestrel's count.
  const kestrel::DeviceInfo info = engine.properties(device);
  state.counters["device_used_GiB"] = double(info.memory_total - info.memory_free) / (1 << 30);
  state.counters["skipped"] = double(loss_scale.skipped_steps);
}

// A step that cannot run (out of memory) is reported as the benchmark's error; the others still run.
void train_step(benchmark::State& state, kestrel::Device device, Workload workload, DType precision, Mode mode) {
  try {
    train_step_or_fail(state, device, workload, precision, mode);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// f16's loss scaling by itself, as TrainStep::update and backward_seed launch it each step: the seed,
// the overflow check over every gradient, and the scale's update (the optimizer reads 4 more floats).
void loss_scaling(benchmark::State& state, kestrel::Device device, Workload workload) {
  const auto spec = kestrel::ModelSpec::load(std::string(KESTREL_BENCH_MODELS_DIR) + "/" + workload.model_file);
  kestrel::Model model(spec, device, 42);
  kestrel::GradScaler scaler(kestrel::LossScaleConfig{}, {}, device);
  kestrel::Tensor gradients = model.flat_gradients();  // (P,) f32
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.seed(1.0));
    scaler.check(gradients);
    scaler.update();
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["parameters"] = double(gradients.numel());
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kestrel::Engine& engine = kestrel::Engine::global();
  for (const auto& plugin : engine.plugins()) {
    const bool cuda = plugin.name == "cuda";
    if (!plugin.loaded || !(cuda || plugin.name == "vulkan")) continue;
    for (const auto& info : plugin.devices) {
      if (!cuda && info.kind != "discrete-gpu" && info.kind != "integrated-gpu") continue;
      kestrel::Device device = engine.device(fmt::format("{}:{}", plugin.name, info.index));
      for (const Workload& w : workloads) {
        if (!cuda && std::string(w.name) != "mlp_8192") continue;
        const std::vector<DType> precisions =
            cuda ? std::vector<DType>{DType::f32, DType::bf16, DType::f16} : std::vector<DType>{DType::f32, DType::f16};
        const std::vector<Mode> modes =
            cuda ? std::vector<Mode>{Mode::captured, Mode::eager, Mode::data_parallel} : std::vector<Mode>{Mode::captured};
        for (DType precision : precisions)
          for (Mode mode : modes)
            benchmark::RegisterBenchmark(fmt::format("mfu/{}/{}/{}/b{}/{}", w.name, device.str(),
                                                     kestrel::dtype_name(precision), w.batch,
                                                     mode_name(mode))
                                             .c_str(),
                                         train_step, device, w, precision, mode)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime()
                ->MinTime(2.0);
        if (!cuda) continue;
        benchmark::RegisterBenchmark(fmt::format("loss_scaling/{}/{}", w.name, device.str()).c_str(), loss_scaling,
                                     device, w)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
