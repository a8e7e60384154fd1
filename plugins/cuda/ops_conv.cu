// The fused convolution ops (plugin ABI 1.10) through cuDNN: forward, the input's gradient and the
// weight's are cudnnConvolutionForward, BackwardData and BackwardFilter on contiguous NCHW tensors; the
// bias, the ReLU and ReLU's mask on the output gradient are small kernels of our own around them, the
// bias gradient the plugin's reduction (ops_reduce.cu). Each direction's algorithm comes from cuDNN's
// heuristics (cudnnGet*Algorithm_v7: no trial runs, so choosing one works inside a graph capture), once
// per shape, cached, with the math type the heuristics paired it with; its workspace comes from the
// stream-ordered pool. f32 products are full f32 (CUDNN_FMA_MATH, no FFT or Winograd transform) unless
// KESTREL_CUDA_TF32=1, as for the GEMMs; f16/bf16 run on tensor cores with f32 accumulation. The
// stream's cuDNN handle is made with the stream (cuda_plugin.cpp): cudnnCreate allocates, which a graph
// capture would refuse.
#include <cudnn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_kernels.cuh"
#include "cuda_ops.hpp"

namespace kestrel_cuda {

namespace {

void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail(std::string(what) + ": " + cudnnGetErrorString(status));
}

cudnnHandle_t handle_of(kestrel_stream& s) {
  if (!s.dnn) fail("conv2d: cuDNN could not be initialised on this stream: " + s.dnn_error, KESTREL_STATUS_UNAVAILABLE);
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

// A cuDNN descriptor owned by a plan: destroyed with it, or when making it fails part way.
template <class D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class Owned {
 public:
  Owned() { check_cudnn(Create(&d_), "creating a cuDNN descriptor"); }
  ~Owned() { Destroy(d_); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  operator D() const { return d_; }

 private:
  D d_ = nullptr;
};
using TensorDescriptor = Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDescriptor =
    Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// One direction's algorithm, on a convolution descriptor of its own that carries the math type cuDNN's
// heuristics paired with it (the workspace size holds for that pair only); none where cuDNN offers no
// algorithm, and then only that direction fails, at its launch.
template <class Algo>
struct Choice {
  ConvDescriptor conv;
  Algo algo{};
  size_t bytes = 0;
  bool found = false;
};

// Algorithms whose arithmetic is not a sum of exact products: FFT and Winograd transforms. Their error is
// of TF32's order (on an H100 a Winograd backward filter was off by 1.7e-3 relative where the conformance
// suite allows f32 3.2e-4), so strict f32 leaves them out with TF32.
bool transformed(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first algorithm the heuristics rank that runs here, in a math type the dtype allows, and is
// deterministic (some backward algorithms add with atomics, and then two runs of one step differ in the
// last bits, which exact resume rules out); a nondeterministic one only where nothing else runs.
// strict: f32 without KESTREL_CUDA_TF32 takes FMA math only (any other may round products to TF32) and
// no transformed algorithm (above).
template <class Perf, class Get>
const Perf* best(std::vector<Perf>& found, Get get, bool strict, const char* what) {
  int count = 0;
  check_cudnn(get(int(found.size()), &count, found.data()), what);
  const Perf* runnable = nullptr;
  for (int i = 0; i < count; ++i) {
    if (found[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (strict && (found[i].mathType != CUDNN_FMA_MATH || transformed(found[i].algo))) continue;
    if (found[i].determinism == CUDNN_DETERMINISTIC) return &found[i];
    if (!runnable) runnable = &found[i];
  }
  return runnable;
}

// The descriptors of one shape and the algorithms cuDNN's heuristics picked for it, made once.
struct Plan {
  TensorDescriptor x, y, bias;
  FilterDescriptor w;
  Choice<cudnnConvolutionFwdAlgo_t> forward;
  Choice<cudnnConvolutionBwdDataAlgo_t> data;
  Choice<cudnnConvolutionBwdFilterAlgo_t> filter;

  Plan(cudnnHandle_t dnn, const ConvShape& s) {
    const cudnnDataType_t type = data_type(s.dtype);
    check_cudnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, s.n, s.c, s.h, s.w), "x descriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, s.n, s.o, s.oh, s.ow), "y descriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, type, 1, s.o, 1, 1), "bias descriptor");
    check_cudnn(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, s.o, s.c, s.kh, s.kw), "weight descriptor");
    // Accumulation in f32 for the 16-bit types (f64 in f64), as the GEMMs do; f32 and f64 products in FMA
    // math (f32 in TF32 tensor-op math only with KESTREL_CUDA_TF32=1), 16-bit ones on tensor cores.
    const cudnnDataType_t compute = s.dtype == KESTREL_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const bool sixteen = s.dtype == KESTREL_DTYPE_F16 || s.dtype == KESTREL_DTYPE_BF16;
    const bool tf32 = s.dtype == KESTREL_DTYPE_F32 && tf32_enabled();
    const cudnnMathType_t math = sixteen || tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    const bool strict = s.dtype == KESTREL_DTYPE_F32 && !tf32;
    for (cudnnConvolutionDescriptor_t conv : {cudnnConvolutionDescriptor_t(forward.conv), cudnnConvolutionDescriptor_t(data.conv),
                                              cudnnConvolutionDescriptor_t(filter.conv)}) {
      check_cudnn(cudnnSetConvolution2dDescriptor(conv, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dilation_h,
                                                  s.dilation_w, CUDNN_CROSS_CORRELATION, compute),
                  "convolution descriptor");
      check_cudnn(cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType");
    }
    int most = 0;
    check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(dnn, &most), "cudnnGetConvolutionForwardAlgorithmMaxCount");
    choose<cudnnConvolutionFwdAlgoPerf_t>(
        forward, most, strict, "cudnnGetConvolutionForwardAlgorithm_v7",
        [&](int want, int* got, auto* out) {
          return cudnnGetConvolutionForwardAlgorithm_v7(dnn, x, w, forward.conv, y, want, got, out);
        },
        [&](auto algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(dnn, x, w, forward.conv, y, algo, bytes);
        });
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(dnn, &most),
                "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
    choose<cudnnConvolutionBwdDataAlgoPerf_t>(
        data, most, strict, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
        [&](int want, int* got, auto* out) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, w, y, data.conv, x, want, got, out);
        },
        [&](auto algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, w, y, data.conv, x, algo, bytes);
        });
    check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(dnn, &most),
                "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
    choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
        filter, most, strict, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
        [&](int want, int* got, auto* out) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, x, y, filter.conv, w, want, got, out);
        },
        [&](auto algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, x, y, filter.conv, w, algo, bytes);
        });
  }

 private:
  // A direction's algorithm from the heuristics `get` (up to `most` candidates; see best), its math type
  // set on the direction's descriptor, then its workspace sized for that pair by `size`.
  template <class Perf, class Algo, class Get, class Size>
  static void choose(Choice<Algo>& choice, int most, bool strict, const char* what, Get get, Size size) {
    std::vector<Perf> found(size_t(std::max(most, 1)));
    const Perf* pick = best(found, [&](int want, int* got, Perf* out) { return get(want, got, out); }, strict, what);
    if (!pick) return;
    choice.algo = pick->algo;
    choice.found = true;
    check_cudnn(cudnnSetConvolutionMathType(choice.conv, pick->mathType), "cudnnSetConvolutionMathType");
    check_cudnn(size(choice.algo, &choice.bytes), "sizing a convolution's workspace");
  }
};

// The choice of `direction` in the plan, or an UNSUPPORTED failure naming the direction.
template <class Algo>
const Choice<Algo>& chosen(const Choice<Algo>& choice, const char* direction) {
  if (!choice.found)
    fail(std::string("conv2d: cuDNN offers no ") + direction + " algorithm for this convolution on this GPU",
         KESTREL_STATUS_UNSUPPORTED);
  return choice;
}

// Plans live for the process, one per shape and device (descriptors are host objects, independent of
// the stream whose handle made them).
const Plan& plan_for(kestrel_stream& s, const ConvShape& shape) {
  static std::mutex mutex;
  static std::map<std::pair<int, decltype(shape.key())>, std::unique_ptr<Plan>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(s.context->device, shape.key());
  auto found = plans.find(key);
  if (found == plans.end()) found = plans.emplace(key, std::make_unique<Plan>(handle_of(s), shape)).first;
  return *found->second;
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
  const auto& choice = chosen(plan.forward, "forward");
  const kestrel_dtype dtype = shape.dtype;
  const bool relu = params_of<kestrel_conv_params>(op, "conv2d").activation == KESTREL_ACTIVATION_RELU;
  std::optional<Scratch> workspace;
  if (choice.bytes) workspace.emplace(s, choice.bytes);
  check_cudnn(cudnnConvolutionForward(handle_of(s), kOne.of(dtype), plan.x, address<void>(op.inputs[0]), plan.w,
                                      address<void>(op.inputs[1]), choice.conv, choice.algo,
                                      workspace ? workspace->get() : nullptr, choice.bytes, kZero.of(dtype), plan.y,
                                      address<void>(op.outputs[0])),
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

// What a backward op hands cuDNN besides its own tensors: the plan of its shape and the direction's
// choice in it (none when the direction does not go through cuDNN: cudnn false), the output gradient (dy
// itself, or with ReLU dy masked where y <= 0, in stream-ordered scratch) and the choice's workspace.
template <class Algo>
struct Backward {
  ConvShape shape;
  const Plan& plan;
  const Choice<Algo>* choice = nullptr;
  std::optional<Scratch> masked, workspace;
  const void* dy;

  Backward(kestrel_stream& s, const kestrel_op& op, const ConvShape& of, Choice<Algo> Plan::*direction,
           const char* name, bool cudnn = true)
      : shape(of), plan(plan_for(s, of)), dy(address<const void>(op.inputs[0])) {
    if (cudnn) choice = &chosen(plan.*direction, name);
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
    if (choice && choice->bytes) workspace.emplace(s, choice->bytes);
  }
  void* workspace_at() const { return workspace ? workspace->get() : nullptr; }
  const void* one() const { return kOne.of(shape.dtype); }
  const void* zero() const { return kZero.of(shape.dtype); }
};

void backward_data(kestrel_stream& s, const kestrel_op& op) {
  const Backward b(s, op, shape_of(op, op.outputs[0], op.inputs[1]), &Plan::data, "backward-data");
  check_cudnn(cudnnConvolutionBackwardData(handle_of(s), b.one(), b.plan.w, address<void>(op.inputs[1]), b.plan.y,
                                           b.dy, b.choice->conv, b.choice->algo, b.workspace_at(), b.choice->bytes,
                                           b.zero(), b.plan.x, address<void>(op.outputs[0])),
              "cudnnConvolutionBackwardData");
}

// The weight gradient is one cuBLAS product by default (KESTREL_CUDA_CONV_WGRAD=cudnn picks cuDNN's backward
// filter instead). In strict f32 the only deterministic algorithm cuDNN's legacy API has left there is
// BWD_FILTER_ALGO_1, which took 41% of the ConvNet's b512 step on an H100; side by side on an H200 the
// product made the whole step 2.0x faster at b64 and 1.24x at b512 (bench/results/
// 2026-11-26-h200-autocast-sdpa-wgrad-floor.md). Read once; anything but "gemm" or "cudnn" is refused.
bool wgrad_by_gemm() {
  static const bool gemm = [] {
    const char* v = std::getenv("KESTREL_CUDA_CONV_WGRAD");
    if (!v || !*v || std::string(v) == "gemm") return true;
    if (std::string(v) == "cudnn") return false;
    fail(std::string("KESTREL_CUDA_CONV_WGRAD is '") + v + "': use gemm (the default) or cudnn",
         KESTREL_STATUS_INVALID_ARGUMENT);
  }();
  return gemm;
}

// dw (O, C*KH*KW) = dy (O, N*L) @ cols (C*KH*KW, N*L)^T: x's windows laid out with the batch inside each
// row and dy moved to (O, N, L), both in scratch, so the sum over the batch happens inside one product.
void weight_gradient_by_gemm(kestrel_stream& s, const kestrel_op& op, const ConvShape& shape, const void* dy) {
  const kestrel_tensor& x = op.inputs[1];
  const auto geometry =
      kestrel::plugin_shapes::conv_geometry(params_of<kestrel_conv_params>(op, "conv2d"), x, op.outputs[0]);
  const kestrel_dtype dtype = shape.dtype;
  const int64_t images = shape.n, channels = shape.o, spatial = int64_t(shape.oh) * shape.ow;
  const int64_t taps = int64_t(shape.c) * shape.kh * shape.kw, reduced = images * spatial;
  const uint64_t bytes = dtype_bytes(dtype);
  Scratch cols(s, uint64_t(taps * reduced) * bytes), moved(s, uint64_t(channels * reduced) * bytes);
  im2col_batch_inner(s, geometry, ref(x), cols.get());
  const int64_t moved_shape[3] = {channels, images, spatial};
  TensorRef from = contiguous_ref(const_cast<void*>(dy), dtype, 3, moved_shape);  // dy (N, O, L) read as (O, N, L)
  from.strides[0] = spatial;
  from.strides[1] = channels * spatial;
  strided_copy(s, from, contiguous_ref(moved.get(), dtype, 3, moved_shape));
  batched_gemm(s, dtype, dtype, 1, channels, taps, reduced, MatrixView{static_cast<char*>(moved.get()), reduced, 1, 0},
               MatrixView{static_cast<char*>(cols.get()), 1, reduced, 0},
               MatrixView{static_cast<char*>(address<void>(op.outputs[0])), taps, 1, 0}, 1.0, 0.0);
}

void backward_filter(kestrel_stream& s, const kestrel_op& op) {
  const ConvShape shape = shape_of(op, op.inputs[1], op.outputs[0]);
  const int64_t reduced = int64_t(shape.n) * shape.oh * shape.ow;  // cuBLAS takes int extents
  const bool gemm = wgrad_by_gemm() && reduced <= INT32_MAX;
  const Backward b(s, op, shape, &Plan::filter, "backward-filter", !gemm);
  if (gemm) {
    weight_gradient_by_gemm(s, op, b.shape, b.dy);
  } else {
    check_cudnn(cudnnConvolutionBackwardFilter(handle_of(s), b.one(), b.plan.x, address<void>(op.inputs[1]), b.plan.y,
                                               b.dy, b.choice->conv, b.choice->algo, b.workspace_at(), b.choice->bytes,
                                               b.zero(), b.plan.w, address<void>(op.outputs[0])),
                "cudnnConvolutionBackwardFilter");
  }
  if (op.num_outputs < 2) return;
  // db (O) = dy (N, O, L) summed over images and pixels by the reduction kernels: splits of each channel's
  // elements folded by many blocks and combined in a fixed order (the same on every run), in double.
  const int64_t images_channels_pixels[3] = {b.shape.n, b.shape.o, int64_t(b.shape.oh) * b.shape.ow};
  const int64_t channels[3] = {1, b.shape.o, 1};
  const kestrel_dtype dtype = op.outputs[1].dtype;
  reduce_into(s, contiguous_ref(const_cast<void*>(b.dy), dtype, 3, images_channels_pixels),
              contiguous_ref(address<void>(op.outputs[1]), dtype, 3, channels), KESTREL_REDUCE_SUM);
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
