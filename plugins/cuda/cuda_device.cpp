// Devices, contexts and memory of the CUDA plugin: probing, device properties, the stream-ordered memory
// pool behind buffers, pinned host memory, copies and memory statistics.
//
// Buffers come from a memory pool owned by the context (cudaMemPoolCreate) through
// cudaMallocFromPoolAsync / cudaFreeAsync. The pool's release threshold is "never", so freed blocks stay
// cached for the next step's allocations of the same shapes; memory_trim hands them back.
//
// Ordering: buffer_alloc and buffer_free take no stream, but the ABI makes free stream-ordered across all
// of the context's streams. Both run on the context's first stream (streams[0]); with several streams the
// others are joined to it with an event, so a block is never reused before every stream is done with it.
// Before any stream exists, allocation uses an internal stream and waits for it.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cuda_ops.hpp"

namespace kestrel_cuda {

namespace {

std::string mib(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

void copy_string(char* dst, size_t size, const std::string& src) {
  std::strncpy(dst, src.c_str(), size - 1);
  dst[size - 1] = '\0';
}

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

int32_t count_devices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(std::string("no NVIDIA GPU or driver: cudaGetDeviceCount: ") + cudaGetErrorString(err),
         KESTREL_STATUS_UNAVAILABLE);
  }
  return count;
}

void check_device(int32_t device) {
  int32_t count = count_devices();
  if (device < 0 || device >= count)
    fail("no device cuda:" + std::to_string(device) + " (" + std::to_string(count) +
         " visible; check CUDA_VISIBLE_DEVICES)");
}

// The stream that orders allocations of `context` (see the top of this file). Caller holds the mutex.
cudaStream_t order_stream(kestrel_context* context) {
  return context->streams.empty() ? context->internal : context->streams[0]->cuda;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

// Makes every other stream of the context wait for what streams[0] has enqueued so far.
void join_from_first(kestrel_context* context) {
  if (context->streams.size() < 2 || capturing(context->streams[0]->cuda)) return;
  check_cuda(cudaEventRecord(context->order_event, context->streams[0]->cuda), "cudaEventRecord");
  for (size_t i = 1; i < context->streams.size(); ++i)
    check_cuda(cudaStreamWaitEvent(context->streams[i]->cuda, context->order_event, 0), "cudaStreamWaitEvent");
}

// Makes streams[0] wait for what every other stream of the context has enqueued so far.
void join_into_first(kestrel_context* context) {
  if (context->streams.size() < 2 || capturing(context->streams[0]->cuda)) return;
  for (size_t i = 1; i < context->streams.size(); ++i) {
    check_cuda(cudaEventRecord(context->order_event, context->streams[i]->cuda), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(context->streams[0]->cuda, context->order_event, 0), "cudaStreamWaitEvent");
  }
}

}  // namespace

// Captured graphs allocate from the device's graph memory pool, apart from the context's: memory one
// holds back is out of the other's reach until trimmed, so both go back to the driver.
void release_cached_memory(kestrel_context* context) {
  cudaMemPoolTrimTo(context->pool, 0);
  cudaDeviceGraphMemTrim(context->device);
}

namespace {

// Allocates from the pool; after an out-of-memory answer, waits for pending frees, trims the cache and
// tries once more (cached blocks of the wrong sizes are what usually stands in the way).
cudaError_t pool_allocate(kestrel_context* context, cudaStream_t stream, uint64_t bytes, void** ptr) {
  cudaError_t err = cudaMallocFromPoolAsync(ptr, bytes, context->pool, stream);
  if (err != cudaErrorMemoryAllocation) return err;
  cudaGetLastError();  // clear the error so the context stays usable
  if (capturing(stream)) return err;
  for (kestrel_stream* s : context->streams) cudaStreamSynchronize(s->cuda);
  cudaStreamSynchronize(context->internal);
  release_cached_memory(context);
  err = cudaMallocFromPoolAsync(ptr, bytes, context->pool, stream);
  if (err != cudaSuccess) cudaGetLastError();
  return err;
}

}  // namespace

[[noreturn]] void fail_cuda(cudaError_t err, const std::string& what) {
  cudaGetLastError();  // clear non-sticky errors; sticky ones stay, which the message says
  std::string detail = what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      fail("out of GPU memory: " + detail + ". Try a smaller batch or free cached memory with empty_cache().",
           KESTREL_STATUS_OUT_OF_MEMORY);
    case cudaErrorNoDevice: case cudaErrorInsufficientDriver: case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch: case cudaErrorCompatNotSupportedOnDevice:
      fail("the NVIDIA driver or GPU is not available: " + detail, KESTREL_STATUS_UNAVAILABLE);
    case cudaErrorNoKernelImageForDevice: case cudaErrorUnsupportedPtxVersion:
      fail(detail + ". This build has no kernels for this GPU; rebuild with -DKESTREL_CUDA_ARCHITECTURES=<its "
                    "compute capability, e.g. 90> or a newer CUDA toolkit.",
           KESTREL_STATUS_UNAVAILABLE);
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorHardwareStackError: case cudaErrorInvalidPc:
    case cudaErrorAssert: case cudaErrorLaunchTimeout: case cudaErrorECCUncorrectable:
      fail(detail + ". The CUDA context is no longer usable: restart the process. To find the faulting kernel, "
                    "run with CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer.",
           KESTREL_STATUS_INTERNAL);
    case cudaErrorStreamCaptureUnsupported: case cudaErrorStreamCaptureInvalidated: case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched: case cudaErrorStreamCaptureUnjoined: case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit: case cudaErrorStreamCaptureWrongThread: case cudaErrorCapturedEvent:
      fail(detail + ". This call is not allowed while the stream is being captured; end the capture first.",
           KESTREL_STATUS_INVALID_ARGUMENT);
    default: fail(detail, KESTREL_STATUS_INTERNAL);
  }
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::string detail = std::string(what) + ": " + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED) fail("out of GPU memory in cuBLAS: " + detail, KESTREL_STATUS_OUT_OF_MEMORY);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH)
    fail(detail, KESTREL_STATUS_UNSUPPORTED);
  fail(detail, KESTREL_STATUS_INTERNAL);
}

Scratch::Scratch(kestrel_stream& stream, uint64_t bytes) : stream_(stream) {
  kestrel_context* context = stream.context;
  cudaError_t err;
  {
    std::lock_guard<std::mutex> lock(context->mutex);  // pool_allocate may walk the stream list
    err = pool_allocate(context, stream.cuda, std::max<uint64_t>(bytes, 64), &ptr_);
  }
  if (err == cudaErrorMemoryAllocation)
    fail("out of GPU memory allocating " + std::to_string(bytes) + " bytes (" + mib(bytes) +
             ") of scratch space (a strided operand repacked, or a fused op's intermediate). Use a smaller batch, or "
             "free cached memory with empty_cache().",
         KESTREL_STATUS_OUT_OF_MEMORY);
  check_cuda(err, "cudaMallocFromPoolAsync (scratch)");
}

Scratch::~Scratch() {
  if (ptr_) cudaFreeAsync(ptr_, stream_.cuda);
}

// ---- ABI entries ----

kestrel_status probe(kestrel_probe_result* result) {
  result->priority = 100;
  result->reason[0] = '\0';
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    result->usable = 0;
    copy_string(result->reason, sizeof(result->reason),
                std::string("no NVIDIA GPU or driver: cudaGetDeviceCount: ") + cudaGetErrorString(err));
  } else if (count == 0) {
    result->usable = 0;
    copy_string(result->reason, sizeof(result->reason), "no NVIDIA GPU: cudaGetDeviceCount found 0 devices");
  } else {
    result->usable = 1;
  }
  return KESTREL_STATUS_OK;
}

kestrel_status device_count(int32_t* count) {
  return guarded([&] { *count = count_devices(); });
}

kestrel_status device_properties(int32_t device, kestrel_device_properties* props) {
  return guarded([&] {
    check_device(device);
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    set_device(device);
    size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    copy_string(props->name, sizeof(props->name), prop.name);
    props->kind = prop.integrated ? KESTREL_DEVICE_KIND_INTEGRATED_GPU : KESTREL_DEVICE_KIND_DISCRETE_GPU;
    props->memory_total = total_bytes;
    props->memory_free = free_bytes;
    copy_string(props->arch, sizeof(props->arch), std::to_string(prop.major) + "." + std::to_string(prop.minor));
    props->compute_units = prop.multiProcessorCount;
    copy_string(props->runtime, sizeof(props->runtime),
                "CUDA " + version_string(runtime) + ", driver " + version_string(driver));
    props->dtype_mask = (1u << KESTREL_DTYPE_F32) | (1u << KESTREL_DTYPE_F16) | (1u << KESTREL_DTYPE_BF16) |
                        (1u << KESTREL_DTYPE_I32) | (1u << KESTREL_DTYPE_I64) | (1u << KESTREL_DTYPE_U8) |
                        (1u << KESTREL_DTYPE_F64);
    // cuBLAS's sm90 kernels (TMA) need 16-byte aligned rows; others fall back to far slower ones.
    if (props->struct_size >= KESTREL_STRUCT_SIZE(kestrel_device_properties, gemm_row_alignment))
      props->gemm_row_alignment = 16;
  });
}

kestrel_status context_create(int32_t device, kestrel_context** out) {
  return guarded([&] {
    check_device(device);
    set_device(device);
    auto* context = new kestrel_context();
    context->device = device;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaError_t err = cudaMemPoolCreate(&context->pool, &props);
    if (err == cudaSuccess) {
      uint64_t keep_everything = UINT64_MAX;  // freed memory stays cached in the pool until memory_trim
      err = cudaMemPoolSetAttribute(context->pool, cudaMemPoolAttrReleaseThreshold, &keep_everything);
    }
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&context->internal, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&context->order_event, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      if (context->internal) cudaStreamDestroy(context->internal);
      if (context->pool) cudaMemPoolDestroy(context->pool);
      delete context;
      fail_cuda(err, "creating the context's memory pool");
    }
    *out = context;
  });
}

void context_destroy(kestrel_context* context) {
  if (!context) return;
  cudaSetDevice(context->device);
  cudaStreamSynchronize(context->internal);
  cudaEventDestroy(context->order_event);
  cudaStreamDestroy(context->internal);
  // Pending frees finish first: cudaMemPoolDestroy defers the release until they have.
  cudaMemPoolDestroy(context->pool);
  delete context;
}

kestrel_status buffer_alloc(kestrel_context* context, uint64_t bytes, kestrel_buffer** buffer) {
  return guarded([&] {
    set_device(context->device);
    const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64;
    std::lock_guard<std::mutex> lock(context->mutex);
    cudaStream_t stream = order_stream(context);
    void* data = nullptr;
    cudaError_t err = pool_allocate(context, stream, rounded, &data);
    if (err == cudaErrorMemoryAllocation)
      fail("out of GPU memory allocating " + std::to_string(bytes) + " bytes (" + mib(bytes) + ") on cuda:" +
               std::to_string(context->device) + " after releasing the cache",
           KESTREL_STATUS_OUT_OF_MEMORY);
    check_cuda(err, "cudaMallocFromPoolAsync");
    if (context->streams.empty())
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // usable by streams made later
    else
      join_from_first(context);
    *buffer = new kestrel_buffer{context, data, bytes, rounded, capturing(stream)};
    if ((*buffer)->from_capture) context->capture_live += 1;
    context->allocated += rounded;
    context->count += 1;
    context->peak = std::max(context->peak, context->allocated);
  });
}

void buffer_free(kestrel_buffer* buffer) {
  if (!buffer) return;
  kestrel_context* context = buffer->context;
  guarded([&] {
    set_device(context->device);
    std::lock_guard<std::mutex> lock(context->mutex);
    context->allocated -= buffer->accounted;
    context->count -= 1;
    cudaStream_t stream = order_stream(context);
    if (capturing(stream) && !buffer->from_capture) {
      // Freeing memory the graph did not allocate cannot be captured, and its replays may use it: the
      // graph keeps it until graph_destroy.
      context->deferred_frees.push_back(buffer->data);
      return;
    }
    if (buffer->from_capture && capturing(stream)) context->capture_live -= 1;
    join_into_first(context);
    check_cuda(cudaFreeAsync(buffer->data, stream), "cudaFreeAsync");
  });
  delete buffer;
}

kestrel_status host_alloc(kestrel_context* context, uint64_t bytes, void** ptr) {
  return guarded([&] {
    set_device(context->device);
    cudaError_t err = cudaHostAlloc(ptr, std::max<uint64_t>(bytes, 1), cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail("out of pinned host memory allocating " + std::to_string(bytes) + " bytes (" + mib(bytes) +
               "); lower the data loader's prefetch depth or batch size",
           KESTREL_STATUS_OUT_OF_MEMORY);
    }
    check_cuda(err, "cudaHostAlloc");
  });
}

void host_free(kestrel_context* context, void* ptr) {
  if (!ptr) return;
  cudaSetDevice(context->device);
  cudaFreeHost(ptr);
}

kestrel_status copy_host_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, const void* src,
                                   uint64_t bytes) {
  return guarded([&] {
    kestrel::plugin_sdk::check_copy_range(dst, dst_offset, bytes, "copy_host_to_device");
    if (bytes == 0) return;
    set_device(stream->context->device);
    check_cuda(cudaMemcpyAsync(static_cast<char*>(dst->data) + dst_offset, src, bytes, cudaMemcpyHostToDevice,
                               stream->cuda),
               "cudaMemcpyAsync (host to device)");
  });
}

kestrel_status copy_device_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t src_offset,
                                   uint64_t bytes) {
  return guarded([&] {
    kestrel::plugin_sdk::check_copy_range(src, src_offset, bytes, "copy_device_to_host");
    if (bytes == 0) return;
    set_device(stream->context->device);
    check_cuda(cudaMemcpyAsync(dst, static_cast<const char*>(src->data) + src_offset, bytes, cudaMemcpyDeviceToHost,
                               stream->cuda),
               "cudaMemcpyAsync (device to host)");
  });
}

kestrel_status copy_device_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                     kestrel_buffer* src, uint64_t src_offset, uint64_t bytes) {
  return guarded([&] {
    kestrel::plugin_sdk::check_copy_range(dst, dst_offset, bytes, "copy_device_to_device");
    kestrel::plugin_sdk::check_copy_range(src, src_offset, bytes, "copy_device_to_device");
    if (bytes == 0) return;
    set_device(stream->context->device);
    // cudaMemcpyDefault: the buffers may live on different devices (unified addressing); peer copies go
    // through the driver.
    check_cuda(cudaMemcpyAsync(static_cast<char*>(dst->data) + dst_offset,
                               static_cast<const char*>(src->data) + src_offset, bytes, cudaMemcpyDefault, stream->cuda),
               "cudaMemcpyAsync (device to device)");
  });
}

kestrel_status memory_stats(kestrel_context* context, kestrel_memory_stats* stats) {
  return guarded([&] {
    uint64_t reserved = 0;
    check_cuda(cudaMemPoolGetAttribute(context->pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
               "cudaMemPoolGetAttribute");
    std::lock_guard<std::mutex> lock(context->mutex);
    stats->allocated = context->allocated;
    stats->reserved = reserved;
    stats->peak_allocated = context->peak;
    stats->alloc_count = context->count;
  });
}

kestrel_status memory_trim(kestrel_context* context) {
  return guarded([&] {
    set_device(context->device);
    std::lock_guard<std::mutex> lock(context->mutex);
    for (kestrel_stream* s : context->streams)
      if (capturing(s->cuda)) fail("memory_trim: a stream of this context is being captured; end the capture first");
    // Frees complete when the device reaches them; only then can their memory go back to the driver.
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    release_cached_memory(context);
  });
}

kestrel_status memory_reset_peak(kestrel_context* context) {
  std::lock_guard<std::mutex> lock(context->mutex);
  context->peak = context->allocated;
  return KESTREL_STATUS_OK;
}

}  // namespace kestrel_cuda
