// Shared pieces of the Vulkan plugin: errors, the opaque ABI objects, and the interfaces between the
// files (instance/devices, memory, submission, pipelines, op families).
//
// Execution model: every launch and copy records one command buffer on its stream, submits it and
// waits for its fence before returning. Streams are therefore trivially ordered, buffer_free never
// races with the GPU, and the event entries are left NULL (the ABI's "launches complete before they
// return"). This is the simplest correct model; overlapping submissions is future work.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kestrel/plugin.h"

namespace kestrel_vk {

// Thrown inside the plugin, turned into a status + last_error at the ABI boundary (vk_plugin.cpp).
struct Failure : std::runtime_error {
  kestrel_status status;
  Failure(kestrel_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};
[[noreturn]] void fail(const std::string& message, kestrel_status status = KESTREL_STATUS_INVALID_ARGUMENT);
const char* result_name(VkResult result);
// Throws a Failure naming `what` when `result` is an error (out-of-memory results map to OUT_OF_MEMORY,
// a lost device to UNAVAILABLE).
void check(VkResult result, const char* what);

// ---- instance and physical devices (vk_instance.cpp) ----

struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties properties{};
  VkPhysicalDeviceMemoryProperties memory{};
  uint32_t subgroup_size = 0;
  uint32_t compute_queue_family = 0;
  bool has_compute_queue = false;
  bool has_int64 = false;          // shaderInt64: needed for i64 tensors
  bool has_memory_budget = false;  // VK_EXT_memory_budget
  std::string driver;              // "llvmpipe (Mesa 23.x)" when VK_KHR_driver_properties says so
};

struct Instance {
  VkInstance handle = VK_NULL_HANDLE;
  uint32_t api_version = VK_API_VERSION_1_1;
  bool validation = false;            // VK_LAYER_KHRONOS_validation is on
  bool validation_missing = false;    // asked for with KESTREL_VULKAN_VALIDATION=1 but not installed
  std::vector<PhysicalDevice> devices;
};

// The process-wide instance, created on first use. Throws UNAVAILABLE with a reason users can act on.
Instance& instance();
void destroy_instance();
const PhysicalDevice& physical_device(int32_t index);
// Dtypes this device computes in (f32, i32 and i64 when shaderInt64 is present).
uint32_t dtype_mask(const PhysicalDevice& device);
void fill_properties(const PhysicalDevice& device, kestrel_device_properties* props);

// ---- parameter block shared with the shaders (uniform block of shaders/common.glsl, std140) ----

struct TensorDesc {
  uint32_t offset;
  int32_t rank;
  uint32_t numel;
  uint32_t contiguous;  // 1 lets the shaders skip the index arithmetic
  uint32_t shape[KESTREL_MAX_RANK];
  uint32_t strides[KESTREL_MAX_RANK];
};
struct Params {
  TensorDesc tensors[4];
  int32_t ints[16];
  float floats[8];
  uint32_t uints[8];
};
static_assert(sizeof(Params) == 448, "Params must match the std140 layout in shaders/common.glsl");

constexpr int kMaxBindings = 4;     // tensor buffers per dispatch (bindings 1..4)
constexpr uint32_t kLocalSize = 256;  // KESTREL_LOCAL_SIZE in common.glsl

}  // namespace kestrel_vk

// ---- the opaque ABI objects ----

struct kestrel_buffer {
  kestrel_context* context;
  VkBuffer buffer;
  VkDeviceMemory memory;
  uint64_t bytes;     // what the caller asked for
  uint64_t reserved;  // what the allocation holds (rounded)
  void* mapped;       // non-null when the memory is host-visible and coherent: copies use memcpy
};

struct kestrel_context {
  const kestrel_vk::PhysicalDevice* physical = nullptr;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  std::mutex queue_mutex;  // vkQueueSubmit needs external synchronisation of the queue

  // Memory types picked at context creation (vk_memory.cpp).
  uint32_t device_memory_type = 0;   // device-local where possible
  uint32_t staging_memory_type = 0;  // host-visible and coherent
  bool device_memory_mapped = false; // device_memory_type is host-visible too (integrated, lavapipe)
  uint64_t max_binding_range = 0;    // maxStorageBufferRange
  uint32_t params_alignment = 256;   // minUniformBufferOffsetAlignment, at least 256

  // Statistics and the cache of freed buffers, keyed by reserved size (vk_memory.cpp).
  std::mutex memory_mutex;
  uint64_t allocated = 0, cached = 0, peak = 0, count = 0;
  std::multimap<uint64_t, kestrel_buffer*> free_buffers;

  // Compute pipelines, created on first use (vk_pipelines.cpp).
  std::mutex pipeline_mutex;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout = VK_NULL_HANDLE;
  std::unordered_map<std::string, VkPipeline> pipelines;
  kestrel_buffer* unused_binding = nullptr;  // bound to unused bindings
};

struct kestrel_stream {
  kestrel_context* context = nullptr;
  VkCommandPool command_pool = VK_NULL_HANDLE;
  VkCommandBuffer commands = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkDescriptorPool descriptor_pool = VK_NULL_HANDLE;
  kestrel_buffer* params = nullptr;   // host-visible ring of Params blocks for one submission
  kestrel_buffer* staging = nullptr;  // host-visible bounce buffer for copies to non-mappable memory
  kestrel_buffer* flags = nullptr;    // host-visible words the index check reports through
};

namespace kestrel_vk {

// ---- memory (vk_memory.cpp) ----

void choose_memory_types(kestrel_context* context);
kestrel_buffer* allocate_buffer(kestrel_context* context, uint64_t bytes);
void release_buffer(kestrel_buffer* buffer);  // back to the cache
void destroy_buffer(kestrel_buffer* buffer);  // back to the driver, not counted
// Host-visible buffer outside the statistics (params, staging, unused bindings).
kestrel_buffer* allocate_host_buffer(kestrel_context* context, uint64_t bytes);
void trim_cache(kestrel_context* context);
void copy_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t offset, const void* src, uint64_t bytes);
void copy_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t offset, uint64_t bytes);
void copy_on_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, kestrel_buffer* src,
                    uint64_t src_offset, uint64_t bytes);

// ---- pipelines (vk_pipelines.cpp) ----

void create_pipeline_layout(kestrel_context* context);
VkPipeline pipeline(kestrel_context* context, const std::string& shader);
void destroy_pipelines(kestrel_context* context);
bool has_shader(const std::string& name);

// ---- submission (vk_submit.cpp) ----

void create_stream_objects(kestrel_stream* stream);
void destroy_stream_objects(kestrel_stream* stream);

// One compute dispatch: a shader variant, its parameter block and buffers, and a grid of workgroups.
struct Dispatch {
  std::string shader;
  Params params{};
  kestrel_buffer* buffers[kMaxBindings] = {};
  uint32_t groups[3] = {1, 1, 1};
};
// A flat grid of at least `invocations` invocations of kLocalSize, split into rows so no dimension
// exceeds the device limit (the shaders' flat_index() undoes the split).
void set_flat_grid(kestrel_context* context, Dispatch& dispatch, uint64_t invocations);
// Records the dispatches in order, with a barrier between each, submits and waits for completion.
void run(kestrel_stream* stream, const std::vector<Dispatch>& dispatches);
// Records `record` into the stream's command buffer, submits and waits.
template <class Record>
void submit_and_wait(kestrel_stream* stream, Record&& record);
void begin_commands(kestrel_stream* stream);
void print_profile();  // KESTREL_VULKAN_PROFILE=1
void end_submit_wait(kestrel_stream* stream);

template <class Record>
void submit_and_wait(kestrel_stream* stream, Record&& record) {
  begin_commands(stream);
  record(stream->commands);
  end_submit_wait(stream);
}

}  // namespace kestrel_vk
