// The Vulkan compute backend: the ABI table and the boundary where C++ errors become statuses.
// Devices, contexts, streams and buffers live in vk_instance/vk_memory/vk_submit.cpp; the ops in
// ops_*.cpp with their GLSL in shaders/, capture and replay in vk_capture.cpp. Launches are
// asynchronous: see the execution model in vk_common.hpp.
#include <cstring>
#include <iterator>

#include "vk_capture.hpp"
#include "vk_ops.hpp"

namespace kestrel_vk {

const char* result_name(VkResult result) {
  switch (result) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
  }
}

void check(VkResult result, const char* what) {
  if (result == VK_SUCCESS) return;
  const std::string message = std::string(what) + " failed: " + result_name(result) + " (" + std::to_string(result) + ")";
  switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      fail(message + "; free tensors or use a smaller batch", KESTREL_STATUS_OUT_OF_MEMORY);
    case VK_ERROR_DEVICE_LOST:
    case VK_ERROR_INITIALIZATION_FAILED:
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      fail(message + "; the Vulkan device or driver is not usable, check `kestrel devices`", KESTREL_STATUS_UNAVAILABLE);
    default: fail(message, KESTREL_STATUS_INTERNAL);
  }
}

namespace {

thread_local std::string last_error_message;

// Runs `body` and converts what it throws into a status and last_error: the one place where C++
// errors cross into the C ABI.
template <class Body>
kestrel_status guarded(Body&& body) {
  return kestrel::plugin_errors::guarded(last_error_message, "vulkan", body);
}

void check_range(const kestrel_buffer* buffer, uint64_t offset, uint64_t bytes, const char* what) {
  if (!buffer) fail(std::string(what) + ": null buffer");
  if (offset > buffer->bytes || bytes > buffer->bytes - offset)
    fail(std::string(what) + ": " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
         " overrun a buffer of " + std::to_string(buffer->bytes) + " bytes");
}

// ---- ABI entries ----

const char* last_error() { return last_error_message.c_str(); }

kestrel_status probe(kestrel_probe_result* result) {
  result->reason[0] = '\0';
  result->usable = 0;
  result->priority = 0;
  try {
    const Instance& inst = instance();
    if (inst.devices.empty()) {
      std::strncpy(result->reason,
                   "the Vulkan loader found no device with a compute queue and Vulkan 1.1; install a driver "
                   "(mesa-vulkan-drivers gives the lavapipe software device)",
                   sizeof(result->reason) - 1);
      return KESTREL_STATUS_OK;
    }
    // GPUs beat the CPU plugin (10); a software rasteriser such as lavapipe does not. A GPU that CUDA
    // also drives goes to the CUDA plugin (100): on an H100 the same steps ran 4-12x faster there.
    bool any_gpu = false;
    for (const auto& d : inst.devices) any_gpu |= d.properties.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
    result->usable = 1;
    result->priority = any_gpu ? 90 : 5;
    std::string remark = any_gpu ? "" : "software Vulkan only (slower than --backend cpu)";
    if (inst.validation) remark += remark.empty() ? "validation layer on" : "; validation layer on";
    if (inst.validation_missing)
      remark += std::string(remark.empty() ? "" : "; ") +
                "KESTREL_VULKAN_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed "
                "(install vulkan-validationlayers)";
    std::strncpy(result->reason, remark.c_str(), sizeof(result->reason) - 1);
  } catch (const std::exception& e) {
    std::strncpy(result->reason, e.what(), sizeof(result->reason) - 1);
  }
  return KESTREL_STATUS_OK;
}

void shutdown() { destroy_instance(); }

kestrel_status device_count(int32_t* count) {
  return guarded([&] { *count = static_cast<int32_t>(instance().devices.size()); });
}

kestrel_status device_properties(int32_t device, kestrel_device_properties* props) {
  return guarded([&] { fill_properties(physical_device(device), props); });
}

void context_destroy(kestrel_context* context) {
  if (!context) return;
  print_profile();
  if (context->device) {
    vkDeviceWaitIdle(context->device);
    destroy_memory(context);
    destroy_host_buffer(context->unused_binding);
    destroy_pipelines(context);
    close_pipeline_cache(context);
    vkDestroyDevice(context->device, nullptr);
  }
  delete context;
}

kestrel_status context_create(int32_t device, kestrel_context** out) {
  kestrel_context* context = nullptr;
  kestrel_status status = guarded([&] {
    const PhysicalDevice& physical = physical_device(device);
    context = new kestrel_context();
    context->physical = &physical;
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue.queueFamilyIndex = physical.compute_queue_family;
    queue.queueCount = 1;
    queue.pQueuePriorities = &priority;
    VkPhysicalDeviceFeatures features{};
    features.shaderInt64 = physical.has_int64 ? VK_TRUE : VK_FALSE;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    // The f16 shader variants declare float16_t storage buffers (see describe() in vk_instance.cpp).
    VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    storage16.storageBuffer16BitAccess = VK_TRUE;
    if (physical.has_16bit_storage) info.pNext = &storage16;
    info.queueCreateInfoCount = 1;
    info.pQueueCreateInfos = &queue;
    info.pEnabledFeatures = &features;
    check(vkCreateDevice(physical.handle, &info, nullptr, &context->device), "vkCreateDevice");
    vkGetDeviceQueue(context->device, physical.compute_queue_family, 0, &context->queue);
    choose_memory_types(context);
    create_memory(context);
    create_pipeline_layout(context);
    open_pipeline_cache(context);
    context->unused_binding = allocate_host_buffer(context, 256);
    *out = context;
  });
  if (status != KESTREL_STATUS_OK) context_destroy(context);
  return status;
}

void stream_destroy(kestrel_stream* stream) {
  if (!stream) return;
  abandon_capture(stream);  // a capture left open is dropped with its stream
  destroy_stream_objects(stream);
  delete stream;
}

kestrel_status stream_create(kestrel_context* context, kestrel_stream** out) {
  kestrel_stream* stream = new kestrel_stream();
  stream->context = context;
  kestrel_status status = guarded([&] {
    create_stream_objects(stream);
    *out = stream;
  });
  if (status != KESTREL_STATUS_OK) stream_destroy(stream);
  return status;
}

kestrel_status stream_synchronize(kestrel_stream* stream) {
  return guarded([&] {
    if (stream->recording) refuse_while_capturing("stream_synchronize");
    synchronize(stream);
  });
}

// ---- events: the fence of the submission that holds the recorded point (see vk_common.hpp) ----

kestrel_status event_create(kestrel_context* context, kestrel_event** event) {
  return guarded([&] {
    *event = new kestrel_event();
    (*event)->context = context;
  });
}

void event_destroy(kestrel_event* event) { delete event; }

kestrel_status event_record(kestrel_event* event, kestrel_stream* stream) {
  return guarded([&] {
    if (!event || !stream || event->context != stream->context)
      fail("event_record: the event and the stream must exist and belong to the same context");
    if (stream->recording) refuse_while_capturing("event_record");
    flush(stream);  // submitted now, so whatever any stream submits later runs after it
    std::shared_ptr<Fence> fence = latest_fence(stream);
    std::lock_guard<std::mutex> lock(event->mutex);
    event->fence = std::move(fence);
  });
}

kestrel_status stream_wait_event(kestrel_stream* stream, kestrel_event* event) {
  return guarded([&] {
    if (!event || !stream || event->context != stream->context)
      fail("stream_wait_event: the event and the stream must exist and belong to the same context; wait "
           "for an event of another device with event_synchronize",
           KESTREL_STATUS_UNSUPPORTED);
    // Nothing to record: the event's work was submitted by event_record, and one queue runs its
    // submissions in order (each batch begins with a full barrier).
  });
}

kestrel_status event_synchronize(kestrel_event* event) {
  return guarded([&] {
    if (!event) fail("event_synchronize: null event");
    std::shared_ptr<Fence> fence;
    {
      std::lock_guard<std::mutex> lock(event->mutex);
      fence = event->fence;
    }
    if (fence) wait_fence(*fence);
  });
}

kestrel_status buffer_alloc(kestrel_context* context, uint64_t bytes, kestrel_buffer** buffer) {
  return guarded([&] { *buffer = allocate_buffer(context, bytes); });
}

void buffer_free(kestrel_buffer* buffer) {
  if (buffer) release_buffer(buffer);  // stream-ordered: see vk_memory.cpp
}

kestrel_status copy_host_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, const void* src,
                                   uint64_t bytes) {
  return guarded([&] {
    if (stream->recording) refuse_while_capturing("copy_host_to_device");
    check_range(dst, dst_offset, bytes, "copy_host_to_device");
    copy_to_device(stream, dst, dst_offset, src, bytes);
  });
}

kestrel_status copy_device_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t src_offset,
                                   uint64_t bytes) {
  return guarded([&] {
    if (stream->recording) refuse_while_capturing("copy_device_to_host");
    check_range(src, src_offset, bytes, "copy_device_to_host");
    copy_to_host(stream, dst, src, src_offset, bytes);
  });
}

kestrel_status copy_device_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                     kestrel_buffer* src, uint64_t src_offset, uint64_t bytes) {
  return guarded([&] {
    check_range(dst, dst_offset, bytes, "copy_device_to_device");
    check_range(src, src_offset, bytes, "copy_device_to_device");
    if (dst->context != src->context)
      fail("copy_device_to_device between two Vulkan devices is not supported; copy through the host",
           KESTREL_STATUS_UNSUPPORTED);
    copy_on_device(stream, dst, dst_offset, src, src_offset, bytes);
  });
}

kestrel_status memory_stats(kestrel_context* context, kestrel_memory_stats* stats) {
  return guarded([&] { memory_statistics(context, stats); });
}

kestrel_status memory_trim(kestrel_context* context) {
  return guarded([&] {
    // It waits for the queue and could release blocks a capture is about to record uses of.
    if (context_capturing(context))
      fail("memory_trim is not allowed while the stream is being captured; end the capture first");
    trim_memory(context);
  });
}

kestrel_status memory_reset_peak(kestrel_context* context) {
  return guarded([&] { reset_peak(context); });
}

struct Family {
  bool (*supports)(const kestrel_op&, uint32_t);
  void (*launch)(kestrel_stream*, const kestrel_op&);
};

const Family* family_of(kestrel_op_kind kind) {
  static const Family families[] = {KESTREL_OP_FAMILY_TABLE};
  return kestrel::plugin_shapes::family_entry(families, kind);
}

uint32_t context_dtypes(const kestrel_context* context) {
  if (context && context->physical) return dtype_mask(*context->physical);
  return (1u << KESTREL_DTYPE_F32) | (1u << KESTREL_DTYPE_I32) | (1u << KESTREL_DTYPE_I64);
}

int32_t supports_op(kestrel_context* context, const kestrel_op* op) {
  if (!op || op->struct_size < sizeof(kestrel_op) || !valid_tensors(*op)) return 0;
  const Family* family = family_of(op->kind);
  return family && family->supports(*op, context_dtypes(context)) ? 1 : 0;
}

kestrel_status launch(kestrel_stream* stream, const kestrel_op* op) {
  return guarded([&] {
    if (!supports_op(stream->context, op))
      fail("the vulkan backend does not support this op with these dtypes, shapes or strides (it computes in "
           "f32, i32, i64 and, with 16-bit storage, f16; fused ops in f32 (linear also in f16), on contiguous "
           "rows where the CPU plugin wants them)",
           KESTREL_STATUS_UNSUPPORTED);
    for (int i = 0; i < op->num_inputs; ++i) check_bounds(stream->context, op->inputs[i], "input");
    for (int i = 0; i < op->num_outputs; ++i) check_bounds(stream->context, op->outputs[i], "output");
    family_of(op->kind)->launch(stream, *op);
  });
}

// ---- capture and replay (vk_capture.cpp) ----

kestrel_status capture_begin(kestrel_stream* stream) {
  return guarded([&] { begin_capture(stream); });
}

kestrel_status capture_end(kestrel_stream* stream, kestrel_graph** graph) {
  return guarded([&] { *graph = end_capture(stream); });
}

kestrel_status graph_launch(kestrel_graph* graph, kestrel_stream* stream) {
  return guarded([&] { launch_graph(graph, stream); });
}

void graph_destroy(kestrel_graph* graph) { destroy_graph(graph); }

}  // namespace
}  // namespace kestrel_vk

KESTREL_PLUGIN_ENTRY {
  using namespace kestrel_vk;
  static const kestrel_plugin_api api = [] {
    kestrel_plugin_api a{};
    a.struct_size = sizeof(a);
    a.abi_major = KESTREL_PLUGIN_ABI_MAJOR;
    a.abi_minor = KESTREL_PLUGIN_ABI_MINOR;
    a.name = "vulkan";
    a.version = KESTREL_VERSION;
    a.last_error = last_error;
    a.probe = probe;
    a.shutdown = shutdown;
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
