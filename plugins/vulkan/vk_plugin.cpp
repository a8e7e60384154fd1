// The Vulkan compute backend: the ABI table and the boundary where C++ errors become statuses.
// Devices, contexts, streams and buffers live in vk_instance/vk_memory/vk_submit.cpp; the ops in
// ops_*.cpp with their GLSL in shaders/, capture and replay in vk_capture.cpp. Launches are
// asynchronous: see the execution model in vk_common.hpp.
#include <algorithm>
#include <cstring>
#include <iterator>

#include "vk_capture.hpp"
#include "vk_comm.hpp"
#include "kestrel/plugin_table.hpp"
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

// ---- ABI entries ----

const char* last_error() { return Boundary::last_error(); }

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
  return Boundary::guarded([&] { *count = static_cast<int32_t>(instance().devices.size()); });
}

kestrel_status device_properties(int32_t device, kestrel_device_properties* props) {
  return Boundary::guarded([&] { fill_properties(physical_device(device), props); });
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
  kestrel_status status = Boundary::guarded([&] {
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
    features.shaderFloat64 = physical.has_float64 ? VK_TRUE : VK_FALSE;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    // The f16 shader variants declare float16_t storage buffers (see describe() in vk_instance.cpp).
    VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    storage16.storageBuffer16BitAccess = VK_TRUE;
    if (physical.has_16bit_storage) info.pNext = &storage16;
    // Tensor cores for the f16 GEMM (see PhysicalDevice::coop_n).
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan13Features v13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    const char* coop_extension = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    if (physical.coop_n) {
      coop.cooperativeMatrix = VK_TRUE;
      v12.shaderFloat16 = VK_TRUE;
      v12.vulkanMemoryModel = VK_TRUE;
      v13.subgroupSizeControl = VK_TRUE;
      v13.computeFullSubgroups = VK_TRUE;
      storage16.pNext = &coop;
      coop.pNext = &v12;
      v12.pNext = &v13;
      info.enabledExtensionCount = 1;
      info.ppEnabledExtensionNames = &coop_extension;
    }
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
  leave_collectives(stream);
  destroy_stream_objects(stream);
  delete stream;
}

kestrel_status stream_create(kestrel_context* context, kestrel_stream** out) {
  kestrel_stream* stream = new kestrel_stream();
  stream->context = context;
  kestrel_status status = Boundary::guarded([&] {
    create_stream_objects(stream);
    *out = stream;
  });
  if (status != KESTREL_STATUS_OK) stream_destroy(stream);
  return status;
}

kestrel_status stream_synchronize(kestrel_stream* stream) {
  return Boundary::guarded([&] {
    if (stream->recording) refuse_while_capturing("stream_synchronize");
    synchronize(stream);
  });
}

// ---- events: the fence of the submission that holds the recorded point (see vk_common.hpp) ----

kestrel_status event_create(kestrel_context* context, kestrel_event** event) {
  return Boundary::guarded([&] {
    *event = new kestrel_event();
    (*event)->context = context;
  });
}

void event_destroy(kestrel_event* event) { delete event; }

namespace {

// Drops the fences that have signalled: what waits for them has nothing left to wait for.
void prune_signalled(std::vector<std::shared_ptr<Fence>>& fences) {
  fences.erase(std::remove_if(fences.begin(), fences.end(),
                              [](const auto& f) { return vkGetFenceStatus(f->device, f->handle) == VK_SUCCESS; }),
               fences.end());
}

}  // namespace

kestrel_status event_record(kestrel_event* event, kestrel_stream* stream) {
  return Boundary::guarded([&] {
    if (!event || !stream || event->context != stream->context)
      fail("event_record: the event and the stream must exist and belong to the same context");
    if (stream->recording) refuse_while_capturing("event_record");
    wait_for_collectives(stream);  // the event marks them done, with their results written back
    flush(stream);  // submitted now, so whatever any stream submits later runs after it
    prune_signalled(stream->awaited);
    std::vector<std::shared_ptr<Fence>> fences = stream->awaited;
    if (std::shared_ptr<Fence> latest = latest_fence(stream)) fences.push_back(std::move(latest));
    std::lock_guard<std::mutex> lock(event->mutex);
    event->fences = std::move(fences);
  });
}

kestrel_status stream_wait_event(kestrel_stream* stream, kestrel_event* event) {
  return Boundary::guarded([&] {
    if (!event || !stream || event->context != stream->context)
      fail("stream_wait_event: the event and the stream must exist and belong to the same context; wait "
           "for an event of another device with event_synchronize",
           KESTREL_STATUS_UNSUPPORTED);
    // Nothing to record: the event's work was submitted by event_record, and one queue runs its
    // submissions in order (each batch begins with a full barrier). Host waits on the stream wait for it.
    std::vector<std::shared_ptr<Fence>>& awaited = stream->awaited;
    prune_signalled(awaited);  // bounded, however rarely the host waits on this stream
    std::lock_guard<std::mutex> lock(event->mutex);
    for (const std::shared_ptr<Fence>& fence : event->fences)
      if (std::find(awaited.begin(), awaited.end(), fence) == awaited.end()) awaited.push_back(fence);
  });
}

kestrel_status event_synchronize(kestrel_event* event) {
  return Boundary::guarded([&] {
    if (!event) fail("event_synchronize: null event");
    std::vector<std::shared_ptr<Fence>> fences;
    {
      std::lock_guard<std::mutex> lock(event->mutex);
      fences = event->fences;
    }
    for (const std::shared_ptr<Fence>& fence : fences) wait_fence(*fence);
  });
}

kestrel_status buffer_alloc(kestrel_context* context, uint64_t bytes, kestrel_buffer** buffer) {
  return Boundary::guarded([&] { *buffer = allocate_buffer(context, bytes); });
}

void buffer_free(kestrel_buffer* buffer) {
  if (buffer) release_buffer(buffer);  // stream-ordered: see vk_memory.cpp
}

kestrel_status copy_host_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, const void* src,
                                   uint64_t bytes) {
  return Boundary::guarded([&] {
    if (stream->recording) refuse_while_capturing("copy_host_to_device");
    kestrel::plugin_sdk::check_copy_range(dst, dst_offset, bytes, "copy_host_to_device");
    copy_to_device(stream, dst, dst_offset, src, bytes);
  });
}

kestrel_status copy_device_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t src_offset,
                                   uint64_t bytes) {
  return Boundary::guarded([&] {
    if (stream->recording) refuse_while_capturing("copy_device_to_host");
    kestrel::plugin_sdk::check_copy_range(src, src_offset, bytes, "copy_device_to_host");
    copy_to_host(stream, dst, src, src_offset, bytes);
  });
}

kestrel_status copy_device_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                     kestrel_buffer* src, uint64_t src_offset, uint64_t bytes) {
  return Boundary::guarded([&] {
    kestrel::plugin_sdk::check_copy_range(dst, dst_offset, bytes, "copy_device_to_device");
    kestrel::plugin_sdk::check_copy_range(src, src_offset, bytes, "copy_device_to_device");
    if (dst->context != src->context)
      fail("copy_device_to_device between two Vulkan devices is not supported; copy through the host",
           KESTREL_STATUS_UNSUPPORTED);
    copy_on_device(stream, dst, dst_offset, src, src_offset, bytes);
  });
}

kestrel_status memory_stats(kestrel_context* context, kestrel_memory_stats* stats) {
  return Boundary::guarded([&] { memory_statistics(context, stats); });
}

kestrel_status memory_trim(kestrel_context* context) {
  return Boundary::guarded([&] {
    // It waits for the queue and could release blocks a capture is about to record uses of.
    if (context_capturing(context))
      fail("memory_trim is not allowed while the stream is being captured; end the capture first");
    trim_memory(context);
  });
}

kestrel_status memory_reset_peak(kestrel_context* context) {
  return Boundary::guarded([&] { reset_peak(context); });
}

struct Family {
  bool (*supports)(const kestrel_op&, uint32_t);
  void (*launch)(kestrel_stream*, const kestrel_op&);
};

// Every family, required and fused.
const kestrel::plugin_sdk::FamilyTable<Family> families{KESTREL_REQUIRED_FAMILIES, KESTREL_FAMILY(linear),
                                                        KESTREL_FAMILY(softmax), KESTREL_FAMILY(softmax_cross_entropy),
                                                        KESTREL_FAMILY(optimizer), KESTREL_FAMILY(lstm_cell),
                                                        KESTREL_FAMILY(gru_cell), KESTREL_FAMILY(attention),
                                                        KESTREL_FAMILY(layer_norm), KESTREL_FAMILY(conv)};

// The dtypes the families' supports_* check, kFloat64Arithmetic where the device has it, and kLoopBudget
// on a software device.
uint32_t context_dtypes(const kestrel_context* context) {
  if (context && context->physical)
    return dtype_mask(*context->physical) | (context->physical->has_float64 ? kFloat64Arithmetic : 0u) |
           (context->physical->properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? kLoopBudget : 0u);
  return (1u << KESTREL_DTYPE_F32) | (1u << KESTREL_DTYPE_I32) | (1u << KESTREL_DTYPE_I64);
}

int32_t supports_op(kestrel_context* context, const kestrel_op* op) {
  return kestrel::plugin_sdk::supports(families, op, context_dtypes(context)) && fits_32bit_indexing(*op);
}

kestrel_status launch(kestrel_stream* stream, const kestrel_op* op) {
  return Boundary::guarded([&] {
    kestrel::plugin_sdk::check_launchable(
        supports_op(stream->context, op), op,
        "the vulkan backend does not support this op with these dtypes, shapes or strides (it computes in f32, i32, "
        "i64 and, with 16-bit storage, f16 and bf16; fused ops in f32 (linear also in f16 and bf16), on contiguous "
        "rows where the CPU plugin wants them)");
    for (int i = 0; i < op->num_inputs; ++i) check_binding_range(stream->context, op->inputs[i], "input");
    for (int i = 0; i < op->num_outputs; ++i) check_binding_range(stream->context, op->outputs[i], "output");
    families.find(op->kind)->launch(stream, *op);
  });
}

}  // namespace

#ifndef KESTREL_VULKAN_MPI
// Built without MPI: no collective is ever issued.
void wait_for_collectives(kestrel_stream*) {}
void leave_collectives(kestrel_stream*) noexcept {}
#endif

}  // namespace kestrel_vk

KESTREL_PLUGIN_ENTRY {
  using namespace kestrel_vk;
  return kestrel::plugin_sdk::plugin_table("vulkan", KESTREL_VERSION, [](kestrel_plugin_api& api) {
    KESTREL_SET_REQUIRED_ENTRIES(api);
    KESTREL_SET_EVENT_ENTRIES(api);
    KESTREL_SET_MEMORY_CACHE_ENTRIES(api);
    KESTREL_SET_CAPTURE_ENTRIES(api);
#ifdef KESTREL_VULKAN_MPI
    KESTREL_SET_COLLECTIVE_ENTRIES(api);
#endif
    api.probe = probe;
    api.shutdown = shutdown;
  });
}
