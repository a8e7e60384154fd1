// The CUDA backend: the ABI table, the error boundary, streams, events, op dispatch and CUDA Graph
// capture/replay. Devices and memory are in cuda_device.cpp; kernels in the ops_*.cu files.
//
// Every entry that touches the GPU first makes the object's device current on the calling thread
// (cudaSetDevice is a cheap thread-local switch), since the engine may drive several devices from one
// thread.
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "cuda_comm.hpp"
#include "cuda_ops.hpp"
#include "kestrel/plugin_table.hpp"

namespace kestrel_cuda {

namespace {

const char* last_error() { return Boundary::last_error(); }

kestrel_status stream_create(kestrel_context* context, kestrel_stream** out) {
  return guarded([&] {
    set_device(context->device);
    auto* stream = new kestrel_stream();
    stream->context = context;
    // Release everything built so far when a later step fails.
    auto cleanup = [stream] {
#ifdef KESTREL_CUDA_CUDNN
      stream->sdpa_plans.reset();  // its plans were built on the handle
      if (stream->dnn) cudnnDestroy(stream->dnn);
#endif
      if (stream->error_host) cudaFreeHost(stream->error_host);
      stream->lt_plans.reset();
      if (stream->blas_lt) cublasLtDestroy(stream->blas_lt);
      if (stream->blas_workspace) cudaFree(stream->blas_workspace);
      if (stream->blas) cublasDestroy(stream->blas);
      if (stream->cuda) cudaStreamDestroy(stream->cuda);
      delete stream;
    };
    try {
      // Non-blocking: no implicit synchronisation with the legacy default stream other libraries use.
      check_cuda(cudaStreamCreateWithFlags(&stream->cuda, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      check_cublas(cublasCreate(&stream->blas), "cublasCreate");
      check_cublas(cublasSetStream(stream->blas, stream->cuda), "cublasSetStream");
      // A workspace of our own, set after cublasSetStream (which resets it): cuBLAS then never allocates
      // during a launch, which graph capture requires.
      check_cuda(cudaMalloc(&stream->blas_workspace, kBlasWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
      check_cublas(cublasSetWorkspace(stream->blas, stream->blas_workspace, kBlasWorkspaceBytes), "cublasSetWorkspace");
      check_cublas(cublasLtCreate(&stream->blas_lt), "cublasLtCreate");
#ifdef KESTREL_CUDA_CUDNN
      // Here rather than at the first convolution, which may come inside a graph capture; a failure
      // leaves the stream usable for everything but convolutions.
      cudnnHandle_t dnn = nullptr;
      cudnnStatus_t status = cudnnCreate(&dnn);
      if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnnSetStream(dnn, stream->cuda);
        if (status != CUDNN_STATUS_SUCCESS) cudnnDestroy(dnn);
      }
      if (status == CUDNN_STATUS_SUCCESS)
        stream->dnn = dnn;
      else
        stream->dnn_error = std::string(cudnnGetErrorString(status)) + " (is libcudnn.so.9 complete and for this CUDA?)";
#endif
      void* slot = nullptr;
      check_cuda(cudaHostAlloc(&slot, sizeof(DeviceErrorSlot), cudaHostAllocMapped | cudaHostAllocPortable),
                 "cudaHostAlloc (error slot)");
      stream->error_host = static_cast<DeviceErrorSlot*>(slot);
      *stream->error_host = DeviceErrorSlot{};
      void* device_view = nullptr;
      check_cuda(cudaHostGetDevicePointer(&device_view, slot, 0), "cudaHostGetDevicePointer");
      stream->error_device = static_cast<DeviceErrorSlot*>(device_view);
    } catch (...) {
      cleanup();
      throw;
    }
    std::lock_guard<std::mutex> lock(context->mutex);
    if (!context->streams.empty()) {
      // Buffers allocated so far are ordered on streams[0]; the new stream must not overtake that.
      check_cuda(cudaEventRecord(context->order_event, context->streams[0]->cuda), "cudaEventRecord");
      check_cuda(cudaStreamWaitEvent(stream->cuda, context->order_event, 0), "cudaStreamWaitEvent");
    }
    context->streams.push_back(stream);
    *out = stream;
  });
}

void stream_destroy(kestrel_stream* stream) {
  if (!stream) return;
  kestrel_context* context = stream->context;
  cudaSetDevice(context->device);
  guarded([&] { wait_for_collectives(stream); });  // a failure was reported to whoever waited last
  cudaStreamSynchronize(stream->cuda);  // later frees may run on another stream: this one must be done
  {
    std::lock_guard<std::mutex> lock(context->mutex);
    auto& list = context->streams;
    list.erase(std::remove(list.begin(), list.end(), stream), list.end());
  }
  stream->lt_plans.reset();
  cublasLtDestroy(stream->blas_lt);
  cublasDestroy(stream->blas);
#ifdef KESTREL_CUDA_CUDNN
  stream->sdpa_plans.reset();  // its plans were built on the handle
  if (stream->dnn) cudnnDestroy(stream->dnn);
#endif
  cudaFree(stream->blas_workspace);
  cudaFreeHost(stream->error_host);
  cudaStreamDestroy(stream->cuda);
  delete stream;
}

// Reports (once) the first data error a kernel recorded on this stream; see DeviceErrorSlot.
void raise_device_error(kestrel_stream* stream) {
  volatile DeviceErrorSlot* slot = stream->error_host;
  if (!slot->flag) return;
  const int kind = slot->kind;
  const long long value = slot->value, extent = slot->extent;
  slot->flag = 0;
  const std::string v = std::to_string(value), e = std::to_string(extent);
  switch (kind) {
    case DEVICE_ERROR_GATHER:
      fail("gather: index " + v + " is out of range for an axis of size " + e +
           " (found on the GPU; that output element was set to 0). Check the indices passed to gather.");
    case DEVICE_ERROR_SCATTER:
      fail("scatter_add: index " + v + " is out of range for an axis of size " + e +
           " (found on the GPU; that element was not added). Check the indices passed to scatter_add.");
    default:
      fail("softmax_cross_entropy: label " + v + " is outside the " + e +
           " classes (found on the GPU; that sample's loss is NaN). Check the labels of the batch.");
  }
}

kestrel_status stream_synchronize(kestrel_stream* stream) {
  return guarded([&] {
    set_device(stream->context->device);
    wait_for_collectives(stream);  // polls, so a stalled peer cannot hang this call
    check_cuda(cudaStreamSynchronize(stream->cuda), "cudaStreamSynchronize");
    raise_device_error(stream);
  });
}

kestrel_status event_create(kestrel_context* context, kestrel_event** out) {
  return guarded([&] {
    set_device(context->device);
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    *out = new kestrel_event{context, event};
  });
}

void event_destroy(kestrel_event* event) {
  if (!event) return;
  cudaSetDevice(event->context->device);
  cudaEventDestroy(event->cuda);
  delete event;
}

kestrel_status event_record(kestrel_event* event, kestrel_stream* stream) {
  return guarded([&] {
    set_device(stream->context->device);
    check_cuda(cudaEventRecord(event->cuda, stream->cuda), "cudaEventRecord");
  });
}

kestrel_status stream_wait_event(kestrel_stream* stream, kestrel_event* event) {
  return guarded([&] {
    set_device(stream->context->device);
    check_cuda(cudaStreamWaitEvent(stream->cuda, event->cuda, 0), "cudaStreamWaitEvent");
  });
}

kestrel_status event_synchronize(kestrel_event* event) {
  return guarded([&] {
    set_device(event->context->device);
    check_cuda(cudaEventSynchronize(event->cuda), "cudaEventSynchronize");
  });
}

// ---- ops ----

struct Family {
  bool (*supports)(const kestrel_op&);
  void (*launch)(kestrel_stream&, const kestrel_op&);
};

// Every family, required and fused.
const kestrel::plugin_sdk::FamilyTable<Family> families{KESTREL_REQUIRED_FAMILIES, KESTREL_FAMILY(linear),
                                                        KESTREL_FAMILY(softmax), KESTREL_FAMILY(softmax_cross_entropy),
                                                        KESTREL_FAMILY(optimizer), KESTREL_FAMILY(attention),
                                                        KESTREL_FAMILY(layer_norm), KESTREL_FAMILY(lstm_cell),
                                                        KESTREL_FAMILY(gru_cell),
#ifdef KESTREL_CUDA_CUDNN
                                                        KESTREL_FAMILY(conv), KESTREL_FAMILY(recurrent_layer),
#endif
                                                        };

int32_t supports_op(kestrel_context*, const kestrel_op* op) { return kestrel::plugin_sdk::supports(families, op); }

#ifdef KESTREL_CUDA_CUDNN
kestrel_status op_saved_bytes(kestrel_context* context, const kestrel_op* op, uint64_t* bytes) {
  return guarded([&] {
    set_device(context->device);
    *bytes = recurrent_layer_saved_bytes(*context, *op);
  });
}
#endif

kestrel_status launch(kestrel_stream* stream, const kestrel_op* op) {
  return guarded([&] {
    kestrel::plugin_sdk::check_launchable(supports_op(nullptr, op), op,
                                          "the cuda backend does not support this op with these dtypes, shapes or strides");
    set_device(stream->context->device);
    families.find(op->kind)->launch(*stream, *op);
  });
}

// ---- capture and replay (CUDA Graphs) ----

kestrel_status capture_begin(kestrel_stream* stream) {
  return guarded([&] {
    set_device(stream->context->device);
    // Thread-local mode: only this thread's unsafe calls (synchronous copies, cudaMalloc) are refused
    // while capturing; other threads driving other streams are not affected.
    check_cuda(cudaStreamBeginCapture(stream->cuda, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  });
}

// Pre-capture buffers freed during the capture (see buffer_free) now belong to the graph.
std::vector<void*> take_deferred_frees(kestrel_context* context) {
  std::lock_guard<std::mutex> lock(context->mutex);
  std::vector<void*> kept;
  kept.swap(context->deferred_frees);
  return kept;
}

void free_kept(const std::vector<void*>& kept) {
  for (void* ptr : kept) cudaFree(ptr);  // synchronises: no replay can still be using them
}

kestrel_status capture_end(kestrel_stream* stream, kestrel_graph** out) {
  return guarded([&] {
    kestrel_context* context = stream->context;
    set_device(context->device);
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(stream->cuda, &graph);
    std::vector<void*> kept = take_deferred_frees(context);
    int64_t live = 0;
    {
      std::lock_guard<std::mutex> lock(context->mutex);
      live = std::exchange(context->capture_live, 0);
    }
    if (err != cudaSuccess || live != 0) {
      if (graph) cudaGraphDestroy(graph);
      free_kept(kept);
      if (live != 0)
        fail("capture_end: " + std::to_string(live) +
             " buffer(s) allocated during the capture are still allocated; free them before capture_end or "
             "allocate them before capture_begin");
      fail_cuda(err, "cudaStreamEndCapture (an operation in the captured region cannot be captured)");
    }
    cudaGraphExec_t exec = nullptr;
    // Memory the graph allocates and does not free itself is freed before the next replay reallocates it.
    err = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (err != cudaSuccess) {
      cudaGraphDestroy(graph);
      free_kept(kept);
      fail_cuda(err, "cudaGraphInstantiate");
    }
    *out = new kestrel_graph{graph, exec, context->device, std::move(kept)};
  });
}

kestrel_status graph_launch(kestrel_graph* graph, kestrel_stream* stream) {
  return guarded([&] {
    set_device(stream->context->device);
    cudaError_t err = cudaGraphLaunch(graph->exec, stream->cuda);
    if (err == cudaErrorMemoryAllocation) {
      // The graph's own allocations come from the graph memory pool, which cannot draw on what the
      // context's pool caches (nor on what destroyed graphs left): hand both back and try once more.
      cudaGetLastError();
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      release_cached_memory(stream->context);
      err = cudaGraphLaunch(graph->exec, stream->cuda);
    }
    check_cuda(err, "cudaGraphLaunch");
  });
}

void graph_destroy(kestrel_graph* graph) {
  if (!graph) return;
  cudaSetDevice(graph->device);
  cudaGraphExecDestroy(graph->exec);
  cudaGraphDestroy(graph->graph);
  free_kept(graph->kept);
  delete graph;
}

}  // namespace

}  // namespace kestrel_cuda

KESTREL_PLUGIN_ENTRY {
  using namespace kestrel_cuda;
  return kestrel::plugin_sdk::plugin_table("cuda", KESTREL_VERSION, [](kestrel_plugin_api& api) {
    KESTREL_SET_REQUIRED_ENTRIES(api);
    KESTREL_SET_EVENT_ENTRIES(api);
    KESTREL_SET_PINNED_HOST_ENTRIES(api);
    KESTREL_SET_MEMORY_CACHE_ENTRIES(api);
    KESTREL_SET_CAPTURE_ENTRIES(api);
#ifdef KESTREL_CUDA_NCCL
    KESTREL_SET_COLLECTIVE_ENTRIES(api);
    KESTREL_SET_GROUP_ENTRIES(api);
#endif
#ifdef KESTREL_CUDA_CUDNN
    KESTREL_SET_SAVED_BYTES_ENTRY(api);
#endif
    api.probe = probe;
  });
}
