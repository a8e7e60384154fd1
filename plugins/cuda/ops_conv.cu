// The fused convolution ops (plugin ABI 1.10) through cuDNN: forward, the input's gradient and the
// weight's are cudnnConvolutionForward, BackwardData and BackwardFilter on contiguous NCHW tensors; the
// bias, the ReLU and ReLU's mask on the output gradient are small kernels of our own around them, and
// the bias gradient is cudnnConvolutionBackwardBias. The algorithm comes from cuDNN's heuristics
// (cudnnGet*Algorithm_v7: no trial runs, so choosing one works inside a graph capture), once per shape,
// cached; its workspace comes from the stream-ordered pool. f32 products are full f32 (CUDNN_FMA_MATH)
// unless KESTREL_CUDA_TF32=1, as for the GEMMs; f16/bf16 run on tensor cores with f32 accumulation.
#include <cudnn.h>

#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "cuda_kernels.cuh"
#include "cuda_ops.hpp"

namespace kestrel_cuda {

namespace {

void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail(std::string(what) + ": " + cudnnGetErrorString(status));
}

cudnnHandle_t handle_of(kestrel_stream& s) {
  if (!s.dnn) {
    check_cudnn(cudnnCreate(&s.dnn), "cudnnCreate");
    check_cudnn(cudnnSetStream(s.dnn, s.cuda), "cudnnSetStream");
  }
  return s.dnn;
}

cudnnDataType_t data_type(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F64: return CUDNN_DATA_DOUBLE;
    case KESTREL_DTYPE_F16: return CUDNN_DATA_HALF;
    case KESTREL_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

// What a convolution is, as cuDNN's descriptors say it: x (N,C,H,W), weight (O,C,KH,KW), y (N,O,OH,OW).
struct ConvShape {
  int n, c, h, w, o, kh, kw, oh, ow, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  kestrel_dtype dtype;
  auto key() const {
    return std::make_tuple(n, c, h, w, o, kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, int(dtype));
  }
};

ConvShape shape_of(const kestrel_op& op, const kestrel_tensor& x, const kestrel_tensor& weight) {
  const auto& p = params_of<kestrel_conv_params>(op, "conv2d");
  const auto g = kestrel::plugin_shapes::conv_geometry(p, x, weight);
  return {int(g.n), int(g.c), int(g.h), int(g.w), int(weight.shape[0]), g.kh, g.kw, int(g.oh), int(g.ow),
          g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, x.dtype};
}

// The descriptors of one shape and the algorithms cuDNN's heuristics picked for it, made once.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t data{};
  cudnnConvolutionBwdFilterAlgo_t filter{};
  size_t forward_bytes = 0, data_bytes = 0, filter_bytes = 0;
};

// The first algorithm the heuristics rank that runs here and is deterministic (some backward algorithms
// add with atomics, and then two runs of one step differ in the last bits, which exact resume and the
// trainer's reproducibility rule out); a nondeterministic one only where cuDNN offers nothing else.
template <class Perf, class Get>
Perf best(Get get, const char* what) {
  constexpr int kCandidates = 16;
  Perf found[kCandidates];
  int count = 0;
  check_cudnn(get(kCandidates, &count, found), what);
  const Perf* runnable = nullptr;
  for (int i = 0; i < count; ++i) {
    if (found[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (found[i].determinism == CUDNN_DETERMINISTIC) return found[i];
    if (!runnable) runnable = &found[i];
  }
  if (runnable) return *runnable;
  fail(std::string(what) + ": cuDNN offers no algorithm for this convolution", KESTREL_STATUS_UNSUPPORTED);
}

Plan make_plan(cudnnHandle_t dnn, const ConvShape& s) {
  Plan p;
  const cudnnDataType_t type = data_type(s.dtype);
  check_cudnn(cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateTensorDescriptor(&p.bias), "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor");
  check_cudnn(cudnnCreateConvolutionDescriptor(&p.conv), "cudnnCreateConvolutionDescriptor");
  check_cudnn(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, type, s.n, s.c, s.h, s.w), "x descriptor");
  check_cudnn(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, type, s.n, s.o, s.oh, s.ow), "y descriptor");
  check_cudnn(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, type, 1, s.o, 1, 1), "bias descriptor");
  check_cudnn(cudnnSetFilter4dDescriptor(p.w, type, CUDNN_TENSOR_NCHW, s.o, s.c, s.kh, s.kw), "weight descriptor");
  // Accumulation in f32 for the 16-bit types (f64 in f64), as the GEMMs do.
  const cudnnDataType_t compute = s.dtype == KESTREL_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  check_cudnn(cudnnSetConvolution2dDescriptor(p.conv, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dilation_h,
                                              s.dilation_w, CUDNN_CROSS_CORRELATION, compute),
              "convolution descriptor");
  const bool f32 = s.dtype == KESTREL_DTYPE_F32 || s.dtype == KESTREL_DTYPE_F64;
  check_cudnn(cudnnSetConvolutionMathType(p.conv, f32 && !tf32_enabled() ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
              "cudnnSetConvolutionMathType");
  const auto fwd = best<cudnnConvolutionFwdAlgoPerf_t>(
      [&](int want, int* got, cudnnConvolutionFwdAlgoPerf_t* out) {
        return cudnnGetConvolutionForwardAlgorithm_v7(dnn, p.x, p.w, p.conv, p.y, want, got, out);
      },
      "cudnnGetConvolutionForwardAlgorithm_v7");
  const auto data = best<cudnnConvolutionBwdDataAlgoPerf_t>(
      [&](int want, int* got, cudnnConvolutionBwdDataAlgoPerf_t* out) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, p.w, p.y, p.conv, p.x, want, got, out);
      },
      "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  const auto filter = best<cudnnConvolutionBwdFilterAlgoPerf_t>(
      [&](int want, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* out) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, p.x, p.y, p.conv, p.w, want, got, out);
      },
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  p.forward = fwd.algo, p.forward_bytes = fwd.memory;
  p.data = data.algo, p.data_bytes = data.memory;
  p.filter = filter.algo, p.filter_bytes = filter.memory;
  return p;
}

// Plans live for the process, one per shape and device (descriptors are host objects; cuDNN's handle is
// per stream, so the plan is made with whichever stream asks first).
const Plan& plan_for(kestrel_stream& s, const ConvShape& shape) {
  static std::mutex mutex;
  static std::map<std::pair<int, decltype(shape.key())>, Plan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(s.context->device, shape.key());
  auto found = plans.find(key);
  if (found == plans.end()) found = plans.emplace(key, make_plan(handle_of(s), shape)).first;
  return found->second;
}

// cuDNN's alpha and beta: double for f64 tensors, float otherwise.
struct Scale {
  float f;
  double d;
  const void* of(kestrel_dtype dtype) const { return dtype == KESTREL_DTYPE_F64 ? static_cast<const void*>(&d) : &f; }
};
constexpr Scale kOne{1.0f, 1.0}, kZero{0.0f, 0.0};

// y (N, O, L) = act(y + bias[o]) in place; bias may be null.
template <class E>
__global__ void bias_relu_kernel(typename E::storage* y, const typename E::storage* bias, int64_t count, int64_t spatial,
                                 int64_t channels, bool relu) {
  KESTREL_GRID_STRIDE_LOOP(i, count) {
    auto v = E::load(y[i]);
    if (bias) v += E::load(bias[(i / spatial) % channels]);
    if (relu && v < decltype(v)(0)) v = decltype(v)(0);  // NaN stays NaN, as torch's relu
    y[i] = E::store(v);
  }
}

// masked = y > 0 ? dy : 0 (ReLU's derivative applied to the output gradient).
template <class E>
__global__ void relu_mask_kernel(const typename E::storage* dy, const typename E::storage* y,
                                 typename E::storage* masked, int64_t count) {
  KESTREL_GRID_STRIDE_LOOP(i, count) {
    const auto g = E::load(dy[i]);
    masked[i] = E::store(E::load(y[i]) > decltype(g)(0) ? g : decltype(g)(0));
  }
}

template <class T>
T* address(const kestrel_tensor& t) {
  return static_cast<T*>(static_cast<void*>(ref(t).base));
}

void forward(kestrel_stream& s, const kestrel_op& op) {
  const ConvShape shape = shape_of(op, op.inputs[0], op.inputs[1]);
  const Plan& plan = plan_for(s, shape);
  const kestrel_dtype dtype = shape.dtype;
  const bool relu = params_of<kestrel_conv_params>(op, "conv2d").activation == KESTREL_ACTIVATION_RELU;
  std::optional<Scratch> workspace;
  if (plan.forward_bytes) workspace.emplace(s, plan.forward_bytes);
  check_cudnn(cudnnConvolutionForward(handle_of(s), kOne.of(dtype), plan.x, address<void>(op.inputs[0]), plan.w,
                                      address<void>(op.inputs[1]), plan.conv, plan.forward,
                                      workspace ? workspace->get() : nullptr, plan.forward_bytes, kZero.of(dtype),
                                      plan.y, address<void>(op.outputs[0])),
              "cudnnConvolutionForward");
  const bool bias = op.num_inputs == 3;
  if (!bias && !relu) return;
  const int64_t count = numel(op.outputs[0]), spatial = int64_t(shape.oh) * shape.ow;
  dispatch_float(dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    bias_relu_kernel<E><<<grid_for(count), kBlock, 0, s.cuda>>>(address<S>(op.outputs[0]),
                                                                 bias ? address<const S>(op.inputs[2]) : nullptr, count,
                                                                 spatial, shape.o, relu);
  });
  check_launch("conv2d bias/relu");
}

// What a backward op hands cuDNN besides its own tensors: the plan of its shape, the output gradient
// (dy itself, or with ReLU dy masked where y <= 0, in stream-ordered scratch) and the workspace of the
// plan's algorithm for that op (`bytes`, one of the plan's sizes).
struct Backward {
  ConvShape shape;
  const Plan& plan;
  std::optional<Scratch> masked, workspace;
  const void* dy;
  size_t workspace_bytes;

  Backward(kestrel_stream& s, const kestrel_op& op, const ConvShape& of, size_t Plan::*bytes)
      : shape(of), plan(plan_for(s, of)), dy(address<const void>(op.inputs[0])), workspace_bytes(plan.*bytes) {
    if (op.num_inputs == 3) {
      const int64_t count = numel(op.inputs[0]);
      masked.emplace(s, uint64_t(count) * dtype_bytes(op.inputs[0].dtype));
      dispatch_float(op.inputs[0].dtype, [&](auto elem) {
        using E = decltype(elem);
        using S = typename E::storage;
        relu_mask_kernel<E><<<grid_for(count), kBlock, 0, s.cuda>>>(address<const S>(op.inputs[0]),
                                                                     address<const S>(op.inputs[2]),
                                                                     static_cast<S*>(masked->get()), count);
      });
      check_launch("conv2d relu mask");
      dy = masked->get();
    }
    if (workspace_bytes) workspace.emplace(s, workspace_bytes);
  }
  void* workspace_at() const { return workspace ? workspace->get() : nullptr; }
  const void* one() const { return kOne.of(shape.dtype); }
  const void* zero() const { return kZero.of(shape.dtype); }
};

void backward_data(kestrel_stream& s, const kestrel_op& op) {
  const Backward b(s, op, shape_of(op, op.outputs[0], op.inputs[1]), &Plan::data_bytes);
  check_cudnn(cudnnConvolutionBackwardData(handle_of(s), b.one(), b.plan.w, address<void>(op.inputs[1]), b.plan.y,
                                           b.dy, b.plan.conv, b.plan.data, b.workspace_at(), b.workspace_bytes,
                                           b.zero(), b.plan.x, address<void>(op.outputs[0])),
              "cudnnConvolutionBackwardData");
}

void backward_filter(kestrel_stream& s, const kestrel_op& op) {
  const Backward b(s, op, shape_of(op, op.inputs[1], op.outputs[0]), &Plan::filter_bytes);
  check_cudnn(cudnnConvolutionBackwardFilter(handle_of(s), b.one(), b.plan.x, address<void>(op.inputs[1]), b.plan.y,
                                             b.dy, b.plan.conv, b.plan.filter, b.workspace_at(), b.workspace_bytes,
                                             b.zero(), b.plan.w, address<void>(op.outputs[0])),
              "cudnnConvolutionBackwardFilter");
  if (op.num_outputs == 2)
    check_cudnn(cudnnConvolutionBackwardBias(handle_of(s), b.one(), b.plan.y, b.dy, b.zero(), b.plan.bias,
                                             address<void>(op.outputs[1])),
                "cudnnConvolutionBackwardBias");
}

}  // namespace

bool supports_conv(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::conv_fits(op) || !all_contiguous(op)) return false;
  // cuDNN takes int extents and no empty tensor.
  for (int i = 0; i < op.num_inputs; ++i)
    if (numel(op.inputs[i]) == 0 || numel(op.inputs[i]) > INT32_MAX) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (numel(op.outputs[i]) == 0 || numel(op.outputs[i]) > INT32_MAX) return false;
  return true;
}

void launch_conv(kestrel_stream& s, const kestrel_op& op) {
  switch (op.kind) {
    case KESTREL_OP_CONV2D: return forward(s, op);
    case KESTREL_OP_CONV2D_BACKWARD_DATA: return backward_data(s, op);
    default: return backward_filter(s, op);
  }
}

}  // namespace kestrel_cuda
