// Whole recurrent layers (plugin ABI 1.15) through cuDNN's RNN API: RECURRENT_LAYER is cudnnRNNForward,
// its backward cudnnRNNBackwardData_v8 then cudnnRNNBackwardWeights_v8, one layer in one direction, f32,
// batch-first sequences of full length. cuDNN's standard algorithm, captured in a CUDA graph as the
// engine's steps are, ran lstm_generator's layers 1.25x (LSTM) and 1.65x (GRU) faster than the plugin's
// fused cells on an H200 (bench_cudnn_rnn; bench/results/2026-11-27-h200-lt-packed-rnn-lossscale-vulkan.md).
//
// cuDNN keeps the weights in a weight space of its own layout, so forward copies the layer's four
// tensors into it (a few copies of contiguous blocks: torch's gate order is cuDNN's, and each gate's
// matrix is a row-major (H, F) block there too), and backward copies the weight space's gradient out.
// The `saved` output holds that weight space (backward's BackwardData reads the weights from it) and
// cuDNN's reserve space. f32 products in FMA math unless KESTREL_CUDA_TF32=1, as the GEMMs;
// KESTREL_CUDA_DISABLE_CUDNN_RNN=1 turns the family off (the engine then runs the fused cells).
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_kernels.cuh"
#include "cuda_ops.hpp"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cuda {

namespace {

using kestrel::plugin_shapes::RecurrentShape;

void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail(std::string("recurrent_layer: ") + what + ": " + cudnnGetErrorString(status));
}

cudnnHandle_t handle_of(kestrel_stream& s) {
  if (!s.dnn)
    fail("recurrent_layer: cuDNN could not be initialised on this stream: " + s.dnn_error, KESTREL_STATUS_UNAVAILABLE);
  return s.dnn;
}

cudnnRNNMode_t mode_of(kestrel_recurrent_cell cell) {
  switch (cell) {
    case KESTREL_RECURRENT_RNN_TANH: return CUDNN_RNN_TANH;
    case KESTREL_RECURRENT_RNN_RELU: return CUDNN_RNN_RELU;
    case KESTREL_RECURRENT_GRU: return CUDNN_GRU;
    default: return CUDNN_LSTM;
  }
}

constexpr uint64_t kAlign = 256;  // where the reserve space starts inside `saved`
uint64_t aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// A byte range copied between one of the layer's tensors and the weight space (either way).
struct Block {
  int tensor;  // 0 weight_ih, 1 weight_hh, 2 bias_ih, 3 bias_hh
  uint64_t tensor_offset, space_offset, bytes;
};

// cuDNN's descriptor objects, owned.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct Owned {
  T value = nullptr;
  Owned() { check_cudnn(Create(&value), "creating a descriptor"); }
  ~Owned() { Destroy(value); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  operator T() const { return value; }
};
using RnnDescriptor = Owned<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using DataDescriptor = Owned<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using StateDescriptor = Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using DropoutDescriptor = Owned<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;

// One layer shape's descriptors and sizes, made once; the weight space's layout is read at the first
// launch, where cuDNN gets a real weight space to point into.
struct Plan {
  RecurrentShape shape;
  DropoutDescriptor dropout;
  RnnDescriptor rnn;
  DataDescriptor x, y;
  StateDescriptor state;  // (1, N, H): h's and c's
  size_t weight_bytes = 0, train_work = 0, reserve = 0, infer_work = 0;
  std::vector<Block> blocks;  // empty until the first launch
  std::mutex layout_mutex;    // streams of two threads may launch the plan's first layers at once
  // Held while a launch enqueues its cuDNN calls: cuDNN promises thread safety for threads on handles of
  // their own, and says nothing of an RNN descriptor two of them use at once.
  std::mutex launch_mutex;

  Plan(cudnnHandle_t dnn, const RecurrentShape& s) : shape(s) {
    // No dropout: one layer has none inside it. A zero rate needs no random states (torch does the same).
    check_cudnn(cudnnSetDropoutDescriptor(dropout, dnn, 0.0f, nullptr, 0, 0), "cudnnSetDropoutDescriptor");
    const cudnnMathType_t math = tf32_enabled() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    const int f = int(s.f), h = int(s.h), n = int(s.n), t = int(s.t);
    check_cudnn(cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, mode_of(s.cell), CUDNN_RNN_DOUBLE_BIAS,
                                         CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                         math, f, h, h, 1, dropout, CUDNN_RNN_PADDED_IO_ENABLED),
                "cudnnSetRNNDescriptor_v8");
    const std::vector<int> lengths(size_t(n), t);  // full-length sequences, batch-first as (N, T, F)
    check_cudnn(cudnnSetRNNDataDescriptor(x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, t, n, f,
                                          lengths.data(), nullptr),
                "x descriptor");
    check_cudnn(cudnnSetRNNDataDescriptor(y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, t, n, h,
                                          lengths.data(), nullptr),
                "y descriptor");
    const int dims[3] = {1, n, h}, strides[3] = {n * h, h, 1};
    check_cudnn(cudnnSetTensorNdDescriptor(state, CUDNN_DATA_FLOAT, 3, dims, strides), "state descriptor");
    check_cudnn(cudnnGetRNNWeightSpaceSize(dnn, rnn, &weight_bytes), "cudnnGetRNNWeightSpaceSize");
    check_cudnn(cudnnGetRNNTempSpaceSizes(dnn, rnn, CUDNN_FWD_MODE_TRAINING, x, &train_work, &reserve),
                "cudnnGetRNNTempSpaceSizes (training)");
    size_t no_reserve = 0;  // inference keeps nothing for backward
    check_cudnn(cudnnGetRNNTempSpaceSizes(dnn, rnn, CUDNN_FWD_MODE_INFERENCE, x, &infer_work, &no_reserve),
                "cudnnGetRNNTempSpaceSizes (inference)");
  }

  uint64_t saved_bytes() const { return aligned(weight_bytes) + reserve; }

  // Whether `d` describes a row-major block of the extents `want` (axes of extent 1 aside, wherever
  // cuDNN puts them).
  static bool packed_as(cudnnTensorDescriptor_t d, std::initializer_list<uint64_t> want) {
    cudnnDataType_t type;
    int rank = 0, dims[8] = {}, strides[8] = {};
    check_cudnn(cudnnGetTensorNdDescriptor(d, 8, &type, &rank, dims, strides), "cudnnGetTensorNdDescriptor");
    std::vector<uint64_t> extents, expected;
    uint64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (dims[i] == 1) continue;
      if (uint64_t(strides[i]) != stride) return false;
      stride *= uint64_t(dims[i]);
      extents.insert(extents.begin(), uint64_t(dims[i]));
    }
    for (uint64_t extent : want)
      if (extent != 1) expected.push_back(extent);
    return extents == expected;
  }

  // Where each gate's matrix and bias lies in the weight space at `space`, as Blocks; neighbouring gates
  // that cuDNN keeps back to back become one copy.
  void read_layout(cudnnHandle_t dnn, void* space) {
    std::lock_guard<std::mutex> lock(layout_mutex);
    if (!blocks.empty()) return;
    StateDescriptor matrix, bias;
    const uint64_t elem = sizeof(float), g = uint64_t(shape.gates), hidden = uint64_t(shape.h);
    std::vector<Block> found;
    for (int id = 0; id < int(2 * g); ++id) {  // linear layers 0..G-1 act on x, G..2G-1 on h
      void *m = nullptr, *b = nullptr;
      check_cudnn(cudnnGetRNNWeightParams(dnn, rnn, 0, weight_bytes, space, id, matrix, &m, bias, &b),
                  "cudnnGetRNNWeightParams");
      if (!m || !b) fail("recurrent_layer: cuDNN's weight space lacks gate " + std::to_string(id) + "'s weights");
      const bool input = id < int(g);
      const uint64_t gate = input ? uint64_t(id) : uint64_t(id) - g;
      const uint64_t columns = input ? uint64_t(shape.f) : hidden;
      if (!packed_as(matrix, {hidden, columns}) || !packed_as(bias, {hidden}))
        fail("recurrent_layer: cuDNN's weight space holds gate " + std::to_string(id) +
             " otherwise than as a row-major (H, F) matrix and an (H) bias; this cuDNN's layout is not the one the "
             "plugin copies into (KESTREL_CUDA_DISABLE_CUDNN_RNN=1 runs the fused cells instead)");
      auto offset = [space](void* at) { return uint64_t(static_cast<char*>(at) - static_cast<char*>(space)); };
      found.push_back({input ? 0 : 1, gate * hidden * columns * elem, offset(m), hidden * columns * elem});
      found.push_back({input ? 2 : 3, gate * hidden * elem, offset(b), hidden * elem});
    }
    // cuDNN lists a gate's matrix then its bias; grouped by tensor, neighbours can merge.
    std::stable_sort(found.begin(), found.end(), [](const Block& a, const Block& b) {
      return std::make_pair(a.tensor, a.tensor_offset) < std::make_pair(b.tensor, b.tensor_offset);
    });
    for (const Block& block : found) {
      if (!blocks.empty()) {
        Block& last = blocks.back();
        if (last.tensor == block.tensor && last.tensor_offset + last.bytes == block.tensor_offset &&
            last.space_offset + last.bytes == block.space_offset) {
          last.bytes += block.bytes;
          continue;
        }
      }
      blocks.push_back(block);
    }
  }
};

// Plans live for the process, one per shape and device (descriptors are host objects; the handle that
// sized them may be any stream's).
Plan& plan_for(int device, cudnnHandle_t dnn, const RecurrentShape& s) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, int(s.cell), s.n, s.t, s.f, s.h, tf32_enabled());
  auto found = plans.find(key);
  if (found == plans.end()) found = plans.emplace(key, std::make_unique<Plan>(dnn, s)).first;
  return *found->second;
}

RecurrentShape shape_of(const kestrel_op& op) {
  RecurrentShape shape{};
  kestrel::plugin_shapes::recurrent_layer_fits(op, &shape);
  return shape;
}

// Every sequence's length, T, in device memory, as the v8 calls want it: written by a kernel, so a
// graph capture records it.
__global__ void fill_lengths_kernel(int32_t* lengths, int64_t n, int32_t steps) {
  KESTREL_GRID_STRIDE_LOOP(i, n) { lengths[i] = steps; }
}

// The weight space's blocks to or from the layer's four tensors (`tensors`: weight_ih, weight_hh,
// bias_ih, bias_hh), on the stream.
void copy_blocks(kestrel_stream& s, const Plan& plan, char* space, char* const tensors[4], bool into_space) {
  for (const Block& b : plan.blocks) {
    char* in_space = space + b.space_offset;
    char* in_tensor = tensors[b.tensor] + b.tensor_offset;
    check_cuda(cudaMemcpyAsync(into_space ? in_space : in_tensor, into_space ? in_tensor : in_space, b.bytes,
                               cudaMemcpyDeviceToDevice, s.cuda),
               "cudaMemcpyAsync (recurrent weights)");
  }
}

char* address(const kestrel_tensor& t) { return ref(t).base; }

// The lengths array for the v8 calls, in stream-ordered scratch.
struct Lengths {
  Scratch memory;
  Lengths(kestrel_stream& s, const RecurrentShape& shape) : memory(s, uint64_t(shape.n) * sizeof(int32_t)) {
    fill_lengths_kernel<<<grid_for(shape.n), kBlock, 0, s.cuda>>>(get(), shape.n, int32_t(shape.t));
    check_launch("recurrent_layer lengths");
  }
  int32_t* get() const { return static_cast<int32_t*>(memory.get()); }
};

// in0 x, in1..in4 weights and biases, in5 h0 [, in6 c0] -> out0 y, out1 h_T [, out2 c_T] [, saved].
void forward(kestrel_stream& s, const kestrel_op& op) {
  const RecurrentShape shape = shape_of(op);
  const cudnnHandle_t dnn = handle_of(s);
  Plan& plan = plan_for(s.context->device, dnn, shape);
  std::lock_guard<std::mutex> in_use(plan.launch_mutex);
  const bool lstm = shape.cell == KESTREL_RECURRENT_LSTM;
  if (shape.saved && shape.saved_bytes < plan.saved_bytes())
    fail("recurrent_layer: the saved output has " + std::to_string(shape.saved_bytes) + " bytes, cuDNN needs " +
             std::to_string(plan.saved_bytes()) + " (ask op_saved_bytes)",
         KESTREL_STATUS_INVALID_ARGUMENT);
  char* saved = shape.saved ? address(op.outputs[op.num_outputs - 1]) : nullptr;
  std::optional<Scratch> inference_space;
  if (!saved) inference_space.emplace(s, plan.weight_bytes);
  char* space = saved ? saved : static_cast<char*>(inference_space->get());
  plan.read_layout(dnn, space);
  char* const tensors[4] = {address(op.inputs[1]), address(op.inputs[2]), address(op.inputs[3]), address(op.inputs[4])};
  copy_blocks(s, plan, space, tensors, true);
  const size_t work_bytes = saved ? plan.train_work : plan.infer_work;
  std::optional<Scratch> work;
  if (work_bytes) work.emplace(s, work_bytes);
  const Lengths lengths(s, shape);
  check_cudnn(cudnnRNNForward(dnn, plan.rnn, saved ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                              lengths.get(), plan.x, address(op.inputs[0]), plan.y, address(op.outputs[0]), plan.state,
                              address(op.inputs[5]), address(op.outputs[1]), plan.state,
                              lstm ? address(op.inputs[6]) : nullptr, lstm ? address(op.outputs[2]) : nullptr,
                              plan.weight_bytes, space, work_bytes, work ? work->get() : nullptr,
                              saved ? plan.reserve : 0, saved ? saved + aligned(plan.weight_bytes) : nullptr),
              "cudnnRNNForward");
}

// in0 dy, in1 x, in2 y, in3 weight_ih, in4 weight_hh, in5 h0 [, in6 c0], saved -> out0 dx, out1..out4
// the weights' and biases' gradients.
void backward(kestrel_stream& s, const kestrel_op& op) {
  const RecurrentShape shape = shape_of(op);
  const cudnnHandle_t dnn = handle_of(s);
  Plan& plan = plan_for(s.context->device, dnn, shape);
  std::lock_guard<std::mutex> in_use(plan.launch_mutex);
  const bool lstm = shape.cell == KESTREL_RECURRENT_LSTM;
  if (shape.saved_bytes < plan.saved_bytes())
    fail("recurrent_layer_backward: the saved input has " + std::to_string(shape.saved_bytes) + " bytes, forward left " +
             std::to_string(plan.saved_bytes()),
         KESTREL_STATUS_INVALID_ARGUMENT);
  char* saved = address(op.inputs[op.num_inputs - 1]);
  char* reserve = saved + aligned(plan.weight_bytes);
  plan.read_layout(dnn, saved);
  std::optional<Scratch> work;
  if (plan.train_work) work.emplace(s, plan.train_work);
  const Lengths lengths(s, shape);
  const char* c0 = lstm ? address(op.inputs[6]) : nullptr;
  // The last state's gradients are zero (null), and the initial state's are not wanted (null).
  check_cudnn(cudnnRNNBackwardData_v8(dnn, plan.rnn, lengths.get(), plan.y, address(op.inputs[2]),
                                      address(op.inputs[0]), plan.x, address(op.outputs[0]), plan.state,
                                      address(op.inputs[5]), nullptr, nullptr, plan.state, c0, nullptr, nullptr,
                                      plan.weight_bytes, saved, plan.train_work, work ? work->get() : nullptr,
                                      plan.reserve, reserve),
              "cudnnRNNBackwardData_v8");
  // BackwardWeights only adds (its SET mode is not offered), into a cleared gradient space.
  Scratch grads(s, plan.weight_bytes);
  check_cuda(cudaMemsetAsync(grads.get(), 0, plan.weight_bytes, s.cuda), "cudaMemsetAsync (recurrent gradients)");
  check_cudnn(cudnnRNNBackwardWeights_v8(dnn, plan.rnn, CUDNN_WGRAD_MODE_ADD, lengths.get(), plan.x,
                                         address(op.inputs[1]), plan.state, address(op.inputs[5]), plan.y,
                                         address(op.inputs[2]), plan.weight_bytes, grads.get(), plan.train_work,
                                         work ? work->get() : nullptr, plan.reserve, reserve),
              "cudnnRNNBackwardWeights_v8");
  char* const tensors[4] = {address(op.outputs[1]), address(op.outputs[2]), address(op.outputs[3]),
                            address(op.outputs[4])};
  copy_blocks(s, plan, static_cast<char*>(grads.get()), tensors, false);
}

}  // namespace

bool supports_recurrent_layer(const kestrel_op& op) {
  static const bool disabled = kestrel::plugin_env::flag("KESTREL_CUDA_DISABLE_CUDNN_RNN");
  RecurrentShape shape{};
  if (disabled || !kestrel::plugin_shapes::recurrent_layer_fits(op, &shape) || shape.dtype != KESTREL_DTYPE_F32)
    return false;
  // cuDNN takes int extents, and no empty sequence or layer.
  return shape.n > 0 && shape.t > 0 && shape.f > 0 && shape.n * shape.t * std::max(shape.f, shape.h) <= INT32_MAX &&
         int64_t(shape.gates) * shape.h * std::max(shape.f, shape.h) <= INT32_MAX;
}

void launch_recurrent_layer(kestrel_stream& s, const kestrel_op& op) {
  if (op.kind == KESTREL_OP_RECURRENT_LAYER_BACKWARD)
    backward(s, op);
  else
    forward(s, op);
}

uint64_t recurrent_layer_saved_bytes(kestrel_context& context, const kestrel_op& op) {
  RecurrentShape shape{};
  if (op.kind != KESTREL_OP_RECURRENT_LAYER || !supports_recurrent_layer(op))
    fail("op_saved_bytes: only a recurrent_layer the cuda backend runs saves bytes of its own", KESTREL_STATUS_UNSUPPORTED);
  kestrel::plugin_shapes::recurrent_layer_fits(op, &shape);
  // Sized on the first stream's handle, under the context's lock, which stream_destroy takes before it
  // destroys a handle.
  std::lock_guard<std::mutex> lock(context.mutex);
  cudnnHandle_t dnn = context.streams.empty() ? nullptr : context.streams.front()->dnn;
  if (!dnn) fail("op_saved_bytes: the context has no stream with cuDNN to size the layer on", KESTREL_STATUS_UNAVAILABLE);
  return plan_for(context.device, dnn, shape).saved_bytes();
}

}  // namespace kestrel_cuda
