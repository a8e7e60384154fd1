// Issue 15's "LSTM/GRU through cuDNN's RNN API or your fused cell: measure both": the recurrent part of
// lstm_generator's and gru_generator's training step (batch 32, 128 steps, input 64, two layers of 256,
// f32) done by cuDNN's RNN API at its best (forward in training mode, backward data, backward weights,
// in each of cuDNN's algorithms, captured in a CUDA graph) and by Kestrel's layers (embedding -> the
// recurrent layers, forward and backward of their mean, captured as the trainer captures its step), in
// one run. Both compute the input's gradient; Kestrel's side also runs the embedding before the layers
// (a gather and a scatter-add of 4096 rows of 64: small beside them), which cuDNN's leaves out.
//
//   build/bin/bench_cudnn_rnn --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// Since ABI 1.15 Kestrel's own layers on CUDA are cuDNN's RNN calls too (the plugin's RECURRENT_LAYER):
// its rows then measure what the engine adds around them (weight copies into cuDNN's weight space, the
// embedding); KESTREL_CUDA_DISABLE_CUDNN_RNN=1 gives the fused cells' rows as before.
//
// f32 math on both sides: cuDNN with FMA math only (no TF32), Kestrel without KESTREL_CUDA_TF32. With
// KESTREL_CUDA_TF32=1 cuDNN gets its default math (TF32 allowed) too. Kestrel's rows run on every loaded
// device, so the program also runs (Kestrel's CPU rows only) where there is no GPU.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/graph.h"
#include "kestrel/model.h"
#include "kestrel/ops.h"
#include "kestrel/plugin_env.hpp"

namespace {

using kestrel::Tensor;

// lstm_generator's recurrent shape (models/lstm_generator.json).
constexpr int kBatch = 32, kSteps = 128, kInput = 64, kHidden = 256, kLayers = 2;

// ---- cuDNN's RNN API ------------------------------------------------------------------------------

// A failed cuDNN or CUDA call ends the benchmark with the call and its message (the algorithm may not
// exist for this shape or GPU: that is a result too).
struct Failure {
  std::string what;
};
void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) throw Failure{fmt::format("{}: {}", call, cudnnGetErrorString(status))};
}
void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw Failure{fmt::format("{}: {}", call, cudaGetErrorString(status))};
}
#define CHECKED(call) check((call), #call)

// Device memory freed with its owner.
struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data); }
  void allocate(size_t size) {
    bytes = size;
    if (size) CHECKED(cudaMalloc(&data, size));
  }
  // Small values of either sign from a fixed sequence: the timing does not depend on them, but
  // denormals, NaNs or a saturated gate could.
  void fill_small(float scale) {
    std::vector<float> host(bytes / sizeof(float));
    uint32_t state = 12345;
    for (float& v : host) {
      state = state * 1664525u + 1013904223u;
      v = scale * (float(state >> 8) / float(1u << 24) * 2.0f - 1.0f);
    }
    CHECKED(cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
};

// One multi-layer unidirectional RNN of cuDNN with everything its training step needs.
struct CudnnRnn {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnTensorDescriptor_t state_desc = nullptr;  // (layers, N, H): h's and c's
  DeviceBuffer x, dx, y, dy, weights, weight_grads, workspace, reserve, lengths, dropout_states;

  CudnnRnn(cudnnRNNMode_t mode, cudnnRNNAlgo_t algo) {
    try {
      create(mode, algo);
    } catch (...) {
      release();  // a failed constructor runs no destructor
      throw;
    }
  }
  ~CudnnRnn() { release(); }

  void create(cudnnRNNMode_t mode, cudnnRNNAlgo_t algo) {
    CHECKED(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECKED(cudnnCreate(&handle));
    CHECKED(cudnnSetStream(handle, stream));
    // No dropout between the layers (lstm_generator has none), but the descriptor is required.
    size_t state_bytes = 0;
    CHECKED(cudnnCreateDropoutDescriptor(&dropout));
    CHECKED(cudnnDropoutGetStatesSize(handle, &state_bytes));
    dropout_states.allocate(state_bytes);
    CHECKED(cudnnSetDropoutDescriptor(dropout, handle, 0.0f, dropout_states.data, state_bytes, 0));
    CHECKED(cudnnCreateRNNDescriptor(&rnn));
    const cudnnMathType_t math = kestrel::plugin_env::flag("KESTREL_CUDA_TF32") ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    CHECKED(cudnnSetRNNDescriptor_v8(rnn, algo, mode, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                     CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, math, kInput, kHidden, kHidden, kLayers,
                                     dropout, CUDNN_RNN_PADDED_IO_ENABLED));  // the unpacked layouts need it
    if (algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC) CHECKED(cudnnBuildRNNDynamic(handle, rnn, kBatch));

    // Batch-first sequences of full length, as Kestrel's (N, T, features) tensors.
    std::vector<int> host_lengths(kBatch, kSteps);
    CHECKED(cudnnCreateRNNDataDescriptor(&x_desc));
    CHECKED(cudnnSetRNNDataDescriptor(x_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, kSteps,
                                      kBatch, kInput, host_lengths.data(), nullptr));
    CHECKED(cudnnCreateRNNDataDescriptor(&y_desc));
    CHECKED(cudnnSetRNNDataDescriptor(y_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, kSteps,
                                      kBatch, kHidden, host_lengths.data(), nullptr));
    lengths.allocate(kBatch * sizeof(int32_t));  // the v8 calls read the lengths from device memory too
    CHECKED(cudaMemcpy(lengths.data, host_lengths.data(), lengths.bytes, cudaMemcpyHostToDevice));
    const int dims[3] = {kLayers, kBatch, kHidden}, strides[3] = {kBatch * kHidden, kHidden, 1};
    CHECKED(cudnnCreateTensorDescriptor(&state_desc));
    CHECKED(cudnnSetTensorNdDescriptor(state_desc, CUDNN_DATA_FLOAT, 3, dims, strides));

    size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
    CHECKED(cudnnGetRNNWeightSpaceSize(handle, rnn, &weight_bytes));
    CHECKED(cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_TRAINING, x_desc, &work_bytes, &reserve_bytes));
    weights.allocate(weight_bytes);
    weights.fill_small(0.0625f);  // torch's init bound for 256 hidden units is 1/16
    weight_grads.allocate(weight_bytes);
    workspace.allocate(work_bytes);
    reserve.allocate(reserve_bytes);
    x.allocate(sizeof(float) * kBatch * kSteps * kInput);
    x.fill_small(1.0f);
    dx.allocate(x.bytes);
    y.allocate(sizeof(float) * kBatch * kSteps * kHidden);
    dy.allocate(y.bytes);
    dy.fill_small(1e-3f);
    CHECKED(cudaDeviceSynchronize());  // the fills (legacy stream) before the first step (the non-blocking one)
  }
  void release() {
    if (state_desc) cudnnDestroyTensorDescriptor(state_desc);
    if (y_desc) cudnnDestroyRNNDataDescriptor(y_desc);
    if (x_desc) cudnnDestroyRNNDataDescriptor(x_desc);
    if (rnn) cudnnDestroyRNNDescriptor(rnn);
    if (dropout) cudnnDestroyDropoutDescriptor(dropout);
    if (handle) cudnnDestroy(handle);
    if (stream) cudaStreamDestroy(stream);
  }

  // Forward in training mode from zero states (as Kestrel's layers start), the input's gradient, and
  // the weights' gradient (cuDNN only adds into it, so it is cleared first as a step's would be).
  void step() {
    const auto* seq = static_cast<const int32_t*>(lengths.data);
    CHECKED(cudnnRNNForward(handle, rnn, CUDNN_FWD_MODE_TRAINING, seq, x_desc, x.data, y_desc, y.data, state_desc,
                            nullptr, nullptr, state_desc, nullptr, nullptr, weights.bytes, weights.data,
                            workspace.bytes, workspace.data, reserve.bytes, reserve.data));
    CHECKED(cudnnRNNBackwardData_v8(handle, rnn, seq, y_desc, y.data, dy.data, x_desc, dx.data, state_desc, nullptr,
                                    nullptr, nullptr, state_desc, nullptr, nullptr, nullptr, weights.bytes,
                                    weights.data, workspace.bytes, workspace.data, reserve.bytes, reserve.data));
    CHECKED(cudaMemsetAsync(weight_grads.data, 0, weight_grads.bytes, stream));
    CHECKED(cudnnRNNBackwardWeights_v8(handle, rnn, CUDNN_WGRAD_MODE_ADD, seq, x_desc, x.data, state_desc, nullptr,
                                       y_desc, y.data, weight_grads.bytes, weight_grads.data, workspace.bytes,
                                       workspace.data, reserve.bytes, reserve.data));
  }
};

// A captured step's graph and its executable, released on every path.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// `graph`: the step captured once and replayed, as Kestrel's captured step is; else launched each time.
void cudnn_rnn(benchmark::State& state, cudnnRNNMode_t mode, cudnnRNNAlgo_t algo, bool graph) {
  try {
    CudnnRnn rnn(mode, algo);
    rnn.step();  // warm-up: cuDNN picks and loads its kernels
    Graph captured;
    if (graph) {
      CHECKED(cudaStreamBeginCapture(rnn.stream, cudaStreamCaptureModeThreadLocal));
      try {
        rnn.step();
      } catch (const Failure&) {
        cudaStreamEndCapture(rnn.stream, &captured.graph);  // ends the capture, whatever it holds
        cudaGetLastError();  // the runtime's error slot, which the plugin's launches check, is left clear
        throw;
      }
      CHECKED(cudaStreamEndCapture(rnn.stream, &captured.graph));
      CHECKED(cudaGraphInstantiate(&captured.exec, captured.graph, 0));
    }
    CHECKED(cudaStreamSynchronize(rnn.stream));
    for (auto _ : state) {
      if (captured.exec)
        CHECKED(cudaGraphLaunch(captured.exec, rnn.stream));
      else
        rnn.step();
      CHECKED(cudaStreamSynchronize(rnn.stream));
    }
    state.counters["samples/s"] = benchmark::Counter(double(kBatch), benchmark::Counter::kIsIterationInvariantRate);
  } catch (const Failure& failure) {
    cudaGetLastError();
    state.SkipWithError(failure.what.c_str());
  }
}

// ---- Kestrel's layers ------------------------------------------------------------------------------

std::string layers_json(const char* cell) {
  return fmt::format(
      R"({{"name": "{0}_layers", "input": {{"shape": [{1}], "dtype": "i64"}},
          "layers": [{{"type": "embedding", "num_embeddings": 128, "embedding_dim": {2}}},
                     {{"type": "{0}", "hidden_size": {3}, "num_layers": {4}}}]}})",
      cell, kSteps, kInput, kHidden, kLayers);
}

// Forward and backward of the layers' mean (its gradient is one fill), captured after a warm-up where the
// device offers capture, as the trainer's step is. No optimizer: cuDNN's side has none either.
void kestrel_layers(benchmark::State& state, kestrel::Device device, const char* cell) {
  const kestrel::ModelSpec spec = kestrel::ModelSpec::parse(layers_json(cell), fmt::format("{}_layers", cell));
  kestrel::Model model(spec, device, 42);
  std::vector<int64_t> ids(size_t(kBatch) * kSteps);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 7919 % 113);
  const Tensor tokens = Tensor::from_vector(ids, {kBatch, kSteps}, device);  // (N, T) character ids
  auto forward_backward = [&] {
    uint64_t offset = 0;  // no dropout: nothing is drawn
    model.zero_grad(/*lazy=*/true);
    kestrel::backward(kestrel::fn::mean(model.forward(tokens, true, 7, offset)));
    model.settle_gradients();
  };
  forward_backward();
  kestrel::CapturedGraph graph;
  if (kestrel::CapturedGraph::supported(device)) graph = kestrel::CapturedGraph::capture(device, forward_backward);
  kestrel::Engine::global().synchronize(device);
  for (auto _ : state) {
    if (graph.valid())
      graph.replay();
    else
      forward_backward();
    kestrel::Engine::global().synchronize(device);
  }
  state.counters["samples/s"] = benchmark::Counter(double(kBatch), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::pair<const char*, cudnnRNNMode_t> cells[] = {{"lstm", CUDNN_LSTM}, {"gru", CUDNN_GRU}};
  const std::pair<const char*, cudnnRNNAlgo_t> algorithms[] = {{"standard", CUDNN_RNN_ALGO_STANDARD},
                                                               {"persist_static", CUDNN_RNN_ALGO_PERSIST_STATIC},
                                                               {"persist_dynamic", CUDNN_RNN_ALGO_PERSIST_DYNAMIC}};
  kestrel::Engine& engine = kestrel::Engine::global();
  int gpus = 0;
  const bool cuda = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  for (const auto& [cell, mode] : cells) {
    for (const auto& plugin : engine.plugins())
      if (plugin.loaded)
        for (const auto& info : plugin.devices) {
          const std::string name = fmt::format("{}:{}", plugin.name, info.index);
          benchmark::RegisterBenchmark(fmt::format("recurrent_layers/{}/kestrel/{}", cell, name).c_str(), kestrel_layers,
                                       engine.device(name), cell)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
    if (!cuda) continue;
    for (const auto& [algorithm, algo] : algorithms)
      for (bool graph : {true, false})
        benchmark::RegisterBenchmark(
            fmt::format("recurrent_layers/{}/cudnn_{}/cuda:0/{}", cell, algorithm, graph ? "graph" : "eager").c_str(),
            cudnn_rnn, mode, algo, graph)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
