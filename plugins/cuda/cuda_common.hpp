// Shared host-side pieces of the CUDA plugin: the opaque ABI objects, errors, and tensor references.
// Included by the .cpp files (compiled by the host compiler) and by the .cu files alike, so it holds no
// device code; device helpers live in cuda_kernels.cuh.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#ifdef KESTREL_CUDA_CUDNN
#include <cudnn.h>
#endif
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/plugin.h"
#include "kestrel/plugin_boundary.hpp"

namespace kestrel_cuda {

// Thrown inside the plugin, turned into a status + last_error at the ABI boundary (guarded, below).
using kestrel::plugin_errors::fail;
using kestrel::plugin_errors::Failure;

// A CUDA error that is not the caller's fault. Errors that poison the CUDA context (illegal address,
// launch failure) cannot be recovered from in this process, so the message says so.
[[noreturn]] void fail_cuda(cudaError_t err, const std::string& what);
inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail_cuda(err, what);
}
void check_cublas(cublasStatus_t status, const char* what);

inline constexpr char kPluginName[] = "cuda";
using Boundary = kestrel::plugin_errors::ErrorBoundary<kPluginName>;

// Runs `body` and converts what it throws into a status and last_error: the one place where C++
// errors cross into the C ABI.
template <class Body>
kestrel_status guarded(Body&& body) {
  return Boundary::guarded(body);
}

// Errors kernels find in the data (an index out of range) cannot be returned from an asynchronous
// launch. The kernel records the first one here (pinned host memory mapped into the device) and the
// next stream_synchronize reports it as INVALID_ARGUMENT, the way CPU backends report it at once.
struct DeviceErrorSlot {
  int flag;  // 0: none; set by the kernel after the fields below
  int kind;  // DeviceErrorKind
  long long value, extent;
};
enum DeviceErrorKind { DEVICE_ERROR_GATHER = 1, DEVICE_ERROR_SCATTER = 2, DEVICE_ERROR_LABEL = 3 };

}  // namespace kestrel_cuda

// ---- the opaque ABI objects ----
struct kestrel_stream;

namespace kestrel_cuda {
struct SdpaPlans;
struct LtPlans;
// Each stream's cuBLAS workspace, which cuBLASLt's products share: what NVIDIA recommends for Hopper.
inline constexpr size_t kBlasWorkspaceBytes = 32u << 20;
}

struct kestrel_context {
  int device = 0;
  cudaMemPool_t pool = nullptr;  // this context's own stream-ordered pool
  cudaStream_t internal = nullptr;  // for allocations made while the context has no stream
  cudaEvent_t order_event = nullptr; // joins the context's streams around allocations and frees
  std::mutex mutex;
  uint64_t allocated = 0, peak = 0, count = 0;
  std::vector<kestrel_stream*> streams;  // streams[0] orders allocations (see cuda_device.cpp)
  // Buffers allocated before a capture and freed during it: the graph may still use them, so they are
  // handed to the graph at capture_end and released when it is destroyed.
  std::vector<void*> deferred_frees;
  int64_t capture_live = 0;  // graph allocations not freed yet (the ABI wants none at capture_end)
};

struct kestrel_stream {
  kestrel_context* context = nullptr;
  cudaStream_t cuda = nullptr;
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;  // given to cuBLAS so it never allocates (required for graph capture)
  cublasLtHandle_t blas_lt = nullptr;  // products through cuBLASLt (cublaslt_products.cpp)
  std::shared_ptr<kestrel_cuda::LtPlans> lt_plans;  // their descriptors and algorithms, by shape
#ifdef KESTREL_CUDA_CUDNN
  // For the convolutions (ops_conv.cu), made with the stream; null, with the reason, where cuDNN could not
  // be initialised (then only convolutions fail).
  cudnnHandle_t dnn = nullptr;
  std::string dnn_error;
  // cuDNN's attention graphs built on `dnn`, by shape (cudnn_sdpa.cpp); released before it.
  std::shared_ptr<kestrel_cuda::SdpaPlans> sdpa_plans;
#endif
  kestrel_cuda::DeviceErrorSlot* error_host = nullptr;   // pinned, mapped
  kestrel_cuda::DeviceErrorSlot* error_device = nullptr; // the same memory as the device sees it
  // The communicator of the last collective enqueued (cuda_comm.cpp), when, and what: host waits on the
  // stream poll it with a deadline instead of blocking in CUDA. Null once waited for.
  kestrel_comm* comm = nullptr;
  std::chrono::steady_clock::time_point comm_issued;
  std::string comm_what;
};

struct kestrel_buffer {
  kestrel_context* context;
  void* data;
  uint64_t bytes;
  uint64_t accounted;  // bytes counted in the statistics (rounded up)
  bool from_capture;   // allocated while its stream was being captured (a graph allocation)
};

struct kestrel_event {
  kestrel_context* context;
  cudaEvent_t cuda;
};

struct kestrel_graph {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  int device;
  std::vector<void*> kept;  // pre-capture buffers freed during the capture (see deferred_frees)
};

namespace kestrel_cuda {

inline void set_device(int device) { check_cuda(cudaSetDevice(device), "cudaSetDevice"); }

// ---- tensors ----

// Shared with every backend (kestrel/plugin_shapes.hpp, kestrel/plugin_boundary.hpp).
using kestrel::plugin_sdk::check_in_buffer;
using kestrel::plugin_sdk::params_of;
using kestrel::plugin_shapes::all_contiguous;
using kestrel::plugin_shapes::arity;
using kestrel::plugin_shapes::dtype_bytes;
using kestrel::plugin_shapes::is_float_dtype;
using kestrel::plugin_shapes::is_index_dtype;
using kestrel::plugin_shapes::is_contiguous;
using kestrel::plugin_shapes::numel;
using kestrel::plugin_shapes::same_shape;

// A descriptor resolved to a device address: what kernels and cuBLAS are given.
struct TensorRef {
  char* base = nullptr;  // element (0, ..., 0)
  kestrel_dtype dtype = KESTREL_DTYPE_F32;
  int rank = 0;
  int64_t shape[KESTREL_MAX_RANK] = {};
  int64_t strides[KESTREL_MAX_RANK] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
};
inline TensorRef ref(const kestrel_tensor& t) {
  TensorRef r;
  r.base = static_cast<char*>(t.buffer ? t.buffer->data : nullptr) + t.offset * dtype_bytes(t.dtype);
  r.dtype = t.dtype;
  r.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) {
    r.shape[d] = t.shape[d];
    r.strides[d] = t.strides[d];
  }
  return r;
}
// A contiguous (row-major) reference over raw device memory.
inline TensorRef contiguous_ref(void* base, kestrel_dtype dtype, int rank, const int64_t* shape) {
  TensorRef r;
  r.base = static_cast<char*>(base);
  r.dtype = dtype;
  r.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    r.shape[d] = shape[d];
    r.strides[d] = stride;
    stride *= shape[d];
  }
  return r;
}

// Hands the memory cached by the context's pool and by the graph memory pool back to the driver; the
// caller has waited for the frees it wants released (cuda_device.cpp).
void release_cached_memory(kestrel_context* context);

// Stream-ordered scratch memory from the context's pool, freed on the same stream when it goes out of
// scope: safe while kernels still use it, and valid inside graph capture (becomes alloc/free nodes).
class Scratch {
 public:
  Scratch(kestrel_stream& stream, uint64_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  kestrel_stream& stream_;
  void* ptr_ = nullptr;
};

// ---- ABI entries of cuda_device.cpp, put in the table by cuda_plugin.cpp ----
kestrel_status probe(kestrel_probe_result* result);
kestrel_status device_count(int32_t* count);
kestrel_status device_properties(int32_t device, kestrel_device_properties* props);
kestrel_status context_create(int32_t device, kestrel_context** context);
void context_destroy(kestrel_context* context);
kestrel_status buffer_alloc(kestrel_context* context, uint64_t bytes, kestrel_buffer** buffer);
void buffer_free(kestrel_buffer* buffer);
kestrel_status host_alloc(kestrel_context* context, uint64_t bytes, void** ptr);
void host_free(kestrel_context* context, void* ptr);
kestrel_status copy_host_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, const void* src,
                                   uint64_t bytes);
kestrel_status copy_device_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t src_offset,
                                   uint64_t bytes);
kestrel_status copy_device_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                     kestrel_buffer* src, uint64_t src_offset, uint64_t bytes);
kestrel_status memory_stats(kestrel_context* context, kestrel_memory_stats* stats);
kestrel_status memory_trim(kestrel_context* context);
kestrel_status memory_reset_peak(kestrel_context* context);

}  // namespace kestrel_cuda
