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

#include "cuda_ops.hpp"

namespace kestrel_cuda {

namespace {

constexpr size_t kBlasWorkspaceBytes = 32u << 20;  // what NVIDIA recommends for Hopper

const char* last_error() { return last_error_message().c_str(); }

kestrel_status stream_create(kestrel_context* context, kestrel_stream** out) {
  return guarded([&] {
    set_device(context->device);
    auto* stream = new kestrel_stream();
    stream->context = context;
    // Release everything built so far when a later step fails.
    auto cleanup = [stream] {
      if (stream->error_host) cudaFreeHost(stream->error_host);
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
  cudaStreamSynchronize(stream->cuda);  // later frees may run on another stream: this one must be done
  {
    std::lock_guard<std::mutex> lock(context->mutex);
    auto& list = context->streams;
    list.erase(std::remove(list.begin(), list.end(), stream), list.end());
  }
  cublasDestroy(stream->blas);
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

const Family* family_of(kestrel_op_kind kind) {
  static const Family families[] = {KESTREL_OP_FAMILY_TABLE};
  return kestrel::plugin_shapes::family_entry(families, kind);
}

int32_t supports_op(kestrel_context*, const kestrel_op* op) {
  if (!op || op->struct_size < sizeof(kestrel_op) || !valid_tensors(*op)) return 0;
  const Family* family = family_of(op->kind);
  return family && family->supports(*op) ? 1 : 0;
}

void check_bounds(const kestrel_tensor& t, const char* role) {
  if (!t.buffer) fail(std::string(role) + " tensor has no buffer");
  if (numel(t) == 0) return;
  uint64_t last = t.offset;
  for (int d = 0; d < t.rank; ++d) last += uint64_t(t.shape[d] - 1) * uint64_t(t.strides[d]);
  if ((last + 1) * dtype_bytes(t.dtype) > t.buffer->bytes)
    fail(std::string(role) + " tensor reaches element " + std::to_string(last) + ", past the end of its " +
         std::to_string(t.buffer->bytes) + "-byte buffer");
}

kestrel_status launch(kestrel_stream* stream, const kestrel_op* op) {
  return guarded([&] {
    if (!supports_op(nullptr, op))
      fail("the cuda backend does not support this op with these dtypes, shapes or strides",
           KESTREL_STATUS_UNSUPPORTED);
    for (int i = 0; i < op->num_inputs; ++i) check_bounds(op->inputs[i], "input");
    for (int i = 0; i < op->num_outputs; ++i) check_bounds(op->outputs[i], "output");
    set_device(stream->context->device);
    family_of(op->kind)->launch(*stream, *op);
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
    check_cuda(cudaGraphLaunch(graph->exec, stream->cuda), "cudaGraphLaunch");
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

std::string& last_error_message() {
  thread_local std::string message;
  return message;
}

bool valid_tensors(const kestrel_op& op) {
  if (op.num_inputs < 0 || op.num_inputs > KESTREL_MAX_OP_TENSORS || op.num_outputs < 0 ||
      op.num_outputs > KESTREL_MAX_OP_TENSORS)
    return false;
  auto ok = [](const kestrel_tensor& t) {
    if (t.struct_size < sizeof(kestrel_tensor) || t.dtype < 0 || t.dtype >= KESTREL_DTYPE_COUNT || t.rank < 0 ||
        t.rank > KESTREL_MAX_RANK)
      return false;
    for (int d = 0; d < t.rank; ++d)
      if (t.shape[d] < 0 || t.strides[d] < 0) return false;
    return true;
  };
  for (int i = 0; i < op.num_inputs; ++i)
    if (!ok(op.inputs[i])) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (!ok(op.outputs[i])) return false;
  return true;
}

bool arity(const kestrel_op& op, int inputs, int outputs) {
  return op.num_inputs == inputs && op.num_outputs == outputs && valid_tensors(op);
}

}  // namespace kestrel_cuda

KESTREL_PLUGIN_ENTRY {
  using namespace kestrel_cuda;
  static const kestrel_plugin_api api = [] {
    kestrel_plugin_api a{};
    a.struct_size = sizeof(a);
    a.abi_major = KESTREL_PLUGIN_ABI_MAJOR;
    a.abi_minor = KESTREL_PLUGIN_ABI_MINOR;
    a.name = "cuda";
    a.version = KESTREL_VERSION;
    a.last_error = last_error;
    a.probe = probe;
    a.device_count = device_count;
    a.device_properties = device_properties;
    a.context_create = context_create;
    a.context_destroy = context_destroy;
    a.stream_create = stream_create;
    a.stream_destroy = stream_destroy;
    a.stream_synchronize = stream_synchronize;
    a.event_create = event_create;
    a.event_destroy = event_destroy;
    a.event_record = event_record;
    a.stream_wait_event = stream_wait_event;
    a.event_synchronize = event_synchronize;
    a.buffer_alloc = buffer_alloc;
    a.buffer_free = buffer_free;
    a.host_alloc = host_alloc;
    a.host_free = host_free;
    a.copy_host_to_device = copy_host_to_device;
    a.copy_device_to_host = copy_device_to_host;
    a.copy_device_to_device = copy_device_to_device;
    a.memory_stats = memory_stats;
    a.memory_trim = memory_trim;
    a.memory_reset_peak = memory_reset_peak;
    a.supports_op = supports_op;
    a.launch = launch;
    a.capture_begin = capture_begin;
    a.capture_end = capture_end;
    a.graph_launch = graph_launch;
    a.graph_destroy = graph_destroy;
    return a;
  }();
  return &api;
}
