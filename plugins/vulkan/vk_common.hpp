// Shared pieces of the Vulkan plugin: errors, the opaque ABI objects, and the interfaces between the
// files (instance/devices, memory, submission, pipelines, op families).
//
// Execution model (asynchronous, one VkQueue per context):
//  - Launches and device-to-device copies are recorded into the stream's open command buffer and
//    return at once. A batch is submitted when it holds kDispatchesPerSubmit dispatches or its upload
//    space is full, and at sync points: stream_synchronize, copy_device_to_host, event_record, and the
//    index checks of gather/scatter_add (which read a flag on the host).
//  - Each stream keeps a ring of kSubmissionsInFlight batches (command buffer, fence, descriptor pool,
//    parameter blocks, upload space); opening a batch in a busy slot waits for its fence first, which
//    bounds how far the host runs ahead.
//  - Every command buffer starts with a full memory barrier and has a barrier between its commands, so
//    everything on the queue runs in submission order, across streams too. That is why
//    stream_wait_event needs no semaphore: event_record submits the stream's batch, so anything another
//    stream submits later is ordered after it. Events hold the fence of that submission.
//  - The host never writes device buffers directly: copy_host_to_device memcpys into the batch's
//    upload space and records vkCmdCopyBuffer, so the caller's memory is free on return.
//    copy_device_to_host submits, waits for the stream, then reads (mapping or bounce buffer).
//  - buffer_free is stream-ordered: the range is tagged with every stream's open batch and returns to
//    the free lists once those batches are submitted (the queue orders any later user after them);
//    blocks go back to the driver only after the queue is idle (vk_memory.cpp).
//  - softmax_cross_entropy checks its labels on the device without stopping: a bad label makes its
//    rows NaN and is reported as an error at the stream's next sync point (like CUDA's async errors).
//  - Capture (vk_capture.hpp): while a stream is captured its batches go into the graph's own command
//    buffers, which graph_launch submits through the stream's ring like any other batch.
#pragma once
#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kestrel/plugin.h"
#include "kestrel/plugin_errors.hpp"

namespace kestrel_vk {

// Thrown inside the plugin, turned into a status + last_error at the ABI boundary.
using kestrel::plugin_errors::fail;
using kestrel::plugin_errors::Failure;
inline constexpr char kPluginName[] = "vulkan";
// Every entry runs in Boundary::guarded: the one place where C++ errors cross into the C ABI.
using Boundary = kestrel::plugin_errors::ErrorBoundary<kPluginName>;
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
  // Subgroups that add, compare and vote in compute shaders: reductions and softmax fold through them
  // (shaders/workgroup_fold.glsl). False also with KESTREL_VULKAN_DISABLE_SUBGROUPS=1.
  bool subgroup_folds = false;
  uint32_t compute_queue_family = 0;
  bool has_compute_queue = false;
  bool has_int64 = false;          // shaderInt64: needed for i64 tensors
  bool has_float64 = false;        // shaderFloat64: the loss-scaled Adam update (shaders/optimizer.comp)
  // storageBuffer16BitAccess (VK_KHR_16bit_storage, core in 1.1): f16 tensors as float16_t buffers.
  // False also when KESTREL_VULKAN_DISABLE_F16=1, which tests the path of devices without it.
  bool has_16bit_storage = false;
  bool has_memory_budget = false;  // VK_EXT_memory_budget
  // VK_NV_cooperative_matrix with f16 x f16 + f32 -> f32 matrices of 16 x coop_n x 16 at subgroup scope
  // (coop_n 16 or 8), shaderFloat16, the Vulkan memory model and full subgroups of 32 (1.3): the f16
  // GEMM runs on tensor cores (shaders/gemm_coop.comp). 0 without, or with KESTREL_VULKAN_DISABLE_COOPMAT=1.
  uint32_t coop_n = 0;
  uint32_t timestamp_valid_bits = 0;  // of the compute queue family: 0 means no timestamps (profiling)
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
// Dtypes this device computes in (f32, i32; i64 when shaderInt64 is present; f16 with 16-bit storage).
uint32_t dtype_mask(const PhysicalDevice& device);
void fill_properties(const PhysicalDevice& device, kestrel_device_properties* props);

// ---- parameter block shared with the shaders (uniform block of shaders/common.glsl, std140) ----
// A uniform buffer rather than push constants: at 448 bytes it is far past the 128 bytes of push
// constants every Vulkan device guarantees (maxPushConstantsSize), and four strided tensor descriptors
// do not fit in less. Each dispatch gets its own block in the batch's parameter buffer.

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

// Tensor buffers per dispatch (bindings 1..8): the LSTM cell's backward reads five tensors and writes
// two. Vulkan guarantees only 4 storage buffers per stage; devices with fewer than 8 are not listed.
constexpr int kMaxBindings = 8;
constexpr uint32_t kLocalSize = 256;  // KESTREL_LOCAL_SIZE in common.glsl

}  // namespace kestrel_vk

// ---- the opaque ABI objects ----

namespace kestrel_vk {

struct MemoryBlock;   // vk_memory.cpp
struct MemoryBlocks;  // vk_memory.cpp: every block of a context and its free lists

// A VkFence shared between the submission that signals it and the events recorded on it.
struct Fence {
  VkDevice device = VK_NULL_HANDLE;
  VkFence handle = VK_NULL_HANDLE;
  explicit Fence(VkDevice device);
  ~Fence();
  Fence(const Fence&) = delete;
  Fence& operator=(const Fence&) = delete;
};

// How far a stream has got, readable from other threads (buffer_free tags freed ranges with it).
// Batch ids count from 1; recording > submitted means a batch with commands is still open.
struct StreamProgress {
  std::atomic<uint64_t> recording{0};
  std::atomic<uint64_t> submitted{0};
};

constexpr uint32_t kDispatchesPerSubmit = 128;
constexpr uint32_t kSubmissionsInFlight = 4;

// One batch of recorded work and everything it uses, recycled once its fence signals.
struct Submission {
  VkCommandBuffer commands = VK_NULL_HANDLE;
  VkDescriptorPool descriptor_pool = VK_NULL_HANDLE;
  std::shared_ptr<Fence> fence;
  kestrel_buffer* params = nullptr;  // kDispatchesPerSubmit parameter blocks
  kestrel_buffer* upload = nullptr;  // host-to-device copies and scratch of this batch, grown on demand
  uint64_t upload_used = 0;
  uint32_t dispatches = 0;  // parameter blocks and descriptor sets used
  uint32_t recorded = 0;    // commands recorded; each after the first gets a barrier before it
  uint64_t batch = 0;       // StreamProgress id while open or in flight
  bool open = false, in_flight = false;
  // KESTREL_VULKAN_PROFILE=1: a timestamp before and after each dispatch, and its shader
  VkQueryPool timestamps = VK_NULL_HANDLE;
  std::vector<std::string> timed_shaders;
};

}  // namespace kestrel_vk

struct kestrel_buffer {
  kestrel_context* context = nullptr;
  VkBuffer buffer = VK_NULL_HANDLE;  // device buffers: their block's VkBuffer; helper buffers: their own
  uint64_t offset = 0;               // where this buffer starts inside `buffer`, in bytes
  uint64_t bytes = 0;                // what the caller asked for
  uint64_t reserved = 0;             // the range it holds (rounded up to the allocation alignment)
  void* mapped = nullptr;            // host address of its first byte when host-visible and coherent
  kestrel_vk::MemoryBlock* block = nullptr;   // device buffers: the block it lives in
  VkDeviceMemory own_memory = VK_NULL_HANDLE; // helper buffers (params, staging, flags): their memory
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
  uint64_t buffer_alignment = 256;   // minStorageBufferOffsetAlignment, at least 256 (the ABI wants 64)

  // Device memory: blocks, free ranges, ranges waiting for their streams, statistics (vk_memory.cpp).
  std::mutex memory_mutex;
  kestrel_vk::MemoryBlocks* memory = nullptr;  // created and destroyed by vk_memory.cpp
  // The open capture, if any (guarded by memory_mutex): allocations and frees by its thread belong to it.
  kestrel_graph* capturing = nullptr;
  std::thread::id capture_thread;

  // Live streams' progress, snapshotted by buffer_free.
  std::mutex streams_mutex;
  std::vector<std::shared_ptr<kestrel_vk::StreamProgress>> streams;

  // Compute pipelines, created on first use (vk_pipelines.cpp).
  std::mutex pipeline_mutex;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout = VK_NULL_HANDLE;
  std::unordered_map<std::string, VkPipeline> pipelines;
  kestrel_buffer* unused_binding = nullptr;  // bound to unused bindings
  // Compiled pipelines kept on disk between runs (vk_pipeline_cache.cpp); null when disabled.
  VkPipelineCache pipeline_cache = VK_NULL_HANDLE;
  std::string pipeline_cache_file;
  uint64_t pipeline_cache_loaded = 0;  // checksum of what was loaded: unchanged data is not rewritten
};

struct kestrel_stream {
  kestrel_context* context = nullptr;
  VkCommandPool command_pool = VK_NULL_HANDLE;
  kestrel_vk::Submission ring[kestrel_vk::kSubmissionsInFlight];
  uint32_t current = 0;         // the slot being recorded, or recorded next
  uint64_t batches_opened = 0;  // ids handed to StreamProgress::recording
  std::shared_ptr<kestrel_vk::StreamProgress> progress;
  kestrel_buffer* readback = nullptr;  // host-visible bounce buffer for reads of non-mappable memory
  // Host-visible words the index checks report through: [0..3] the synchronous gather/scatter check,
  // [4..7] the deferred label check of softmax_cross_entropy (flag, value low/high, extent).
  kestrel_buffer* flags = nullptr;
  // While captured: the graph its batches are recorded into instead of the ring (vk_capture.hpp).
  kestrel_graph* recording = nullptr;
  // The flag words of graphs replayed since the last sync, checked like `flags` at the next one.
  std::vector<std::shared_ptr<kestrel_buffer>> replayed_flags;
  // The submissions of other streams this one was told to wait for (stream_wait_event). The queue runs
  // them before anything this stream submits later, but a host wait on this stream (synchronize) must
  // wait for them itself: the stream may have submitted nothing since.
  std::vector<std::shared_ptr<kestrel_vk::Fence>> awaited;
  // The communicator whose collectives issued on this stream may still be running (up to ticket
  // `comm_ticket`), or null (vk_comm.cpp): whatever the stream does next waits for them first.
  kestrel_comm* comm = nullptr;
  uint64_t comm_ticket = 0;
};

struct kestrel_event {
  kestrel_context* context = nullptr;
  std::mutex mutex;
  // The submissions it marks: the recording stream's latest, and those that stream was told to wait for
  // (stream_wait_event) and may have submitted nothing after. Empty: nothing to wait for.
  std::vector<std::shared_ptr<kestrel_vk::Fence>> fences;
};

namespace kestrel_vk {

// ---- memory (vk_memory.cpp) ----

void choose_memory_types(kestrel_context* context);
void create_memory(kestrel_context* context);
void destroy_memory(kestrel_context* context);  // the queue must be idle
kestrel_buffer* allocate_buffer(kestrel_context* context, uint64_t bytes);
// Stream-ordered: the range is reused only after the batches open at this moment are submitted.
void release_buffer(kestrel_buffer* buffer);
// Scratch memory released in stream order once its dispatches are recorded:
// std::unique_ptr<kestrel_buffer, ReleasedInOrder>.
struct ReleasedInOrder {
  void operator()(kestrel_buffer* buffer) const { release_buffer(buffer); }
};
// Hands fully free blocks back to the driver (waits for the queue to go idle first).
void trim_memory(kestrel_context* context);
void memory_statistics(kestrel_context* context, kestrel_memory_stats* stats);
void reset_peak(kestrel_context* context);
// Host-visible buffer with its own memory, outside the statistics (params, staging, flags, bindings).
kestrel_buffer* allocate_host_buffer(kestrel_context* context, uint64_t bytes);
void destroy_host_buffer(kestrel_buffer* buffer);

// ---- copies (vk_copies.cpp) ----

void copy_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t offset, const void* src, uint64_t bytes);
void copy_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t offset, uint64_t bytes);
void copy_on_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, kestrel_buffer* src,
                    uint64_t src_offset, uint64_t bytes);

// ---- pipelines (vk_pipelines.cpp) ----

void create_pipeline_layout(kestrel_context* context);
VkPipeline pipeline(kestrel_context* context, const std::string& shader);
void destroy_pipelines(kestrel_context* context);
bool has_shader(const std::string& name);
// The on-disk pipeline cache (vk_pipeline_cache.cpp): loaded when a context is created, saved when it
// is destroyed. Never fails: without a usable file the cache starts empty.
void open_pipeline_cache(kestrel_context* context);
void close_pipeline_cache(kestrel_context* context);

// ---- submission (vk_submit.cpp) ----

void create_stream_objects(kestrel_stream* stream);
void destroy_stream_objects(kestrel_stream* stream);  // waits for the stream first

// One compute dispatch: a shader variant, its parameter block and buffers, and a grid of workgroups.
struct Dispatch {
  std::string shader;
  Params params{};
  kestrel_buffer* buffers[kMaxBindings] = {};
  uint32_t groups[3] = {1, 1, 1};
};
// A software device (lavapipe) ends an invocation's loops after this many iterations in all.
constexpr int64_t kMaxLoopIterations = 65535;
// What one item of a flat-grid shader costs its invocation in loop iterations when the shader does not
// say: the flat loop's own and element_offset's walk over three strided tensors of rank 8.
constexpr int64_t kFlatItemIterations = 1 + 3 * 8;
// A flat grid for `invocations` items of kLocalSize-wide workgroups, split into rows so no dimension
// exceeds the device limit (the shaders' flat_index() undoes the split). The grid is capped, so an
// invocation walks several items (flat_stride()); on a software device it gets enough workgroups that no
// invocation walks more than kMaxLoopIterations / `iterations_each` items (an item within the budget).
void set_flat_grid(kestrel_context* context, Dispatch& dispatch, uint64_t invocations,
                   int64_t iterations_each = kFlatItemIterations);
// One invocation per row, however many: for shaders whose invocations walk a whole row each. A software
// device (lavapipe) ends an invocation's loops after kMaxLoopIterations in all, so set_flat_grid's capped
// grid, which gives an invocation several rows there, would stop long ones part-way.
void set_row_grid(kestrel_context* context, Dispatch& dispatch, uint64_t rows);
// One workgroup per row or output, `groups` of them: for shaders whose workgroups fold one each (reduce.comp,
// softmax.comp), laid out within the device's grid limits.
void set_workgroup_grid(kestrel_context* context, Dispatch& dispatch, uint64_t groups);
// Records the dispatches in order into the stream's open batch (a barrier before each); returns at once.
void run(kestrel_stream* stream, const std::vector<Dispatch>& dispatches);
// The open batch's command buffer, ready for one more transfer command (a barrier already recorded
// before it when needed).
VkCommandBuffer record_command(kestrel_stream* stream);
// Room for up to `bytes` (at least one byte, at most the upload limit) in the open batch's upload
// space: the buffer and offset to write at and how many bytes were granted. Submits a full batch.
// Up to two record_command calls after it stay in the same batch, as they must.
struct UploadSpace {
  kestrel_buffer* buffer;
  uint64_t offset, bytes;
};
UploadSpace reserve_upload(kestrel_stream* stream, uint64_t bytes);
// Submits the open batch, if it has commands.
void flush(kestrel_stream* stream);
// Submits, waits for every submission of the stream, then reports a deferred error, if one was found.
void synchronize(kestrel_stream* stream);
// The fence of the stream's latest submission, null when it has none in flight. Call after flush.
std::shared_ptr<Fence> latest_fence(kestrel_stream* stream);
void wait_fence(const Fence& fence);

// ---- collectives (vk_comm.cpp; no-ops in a plugin built without MPI) ----

// Waits for the collectives issued on the stream and submits the write-back of their staged results;
// throws PEER_FAILED when the transport failed. Called before the stream records or submits more work
// (open_batch, synchronize, event_record, capture_begin, graph replays).
void wait_for_collectives(kestrel_stream* stream);
// The same as the stream ends: failures are dropped, and the communicator forgets the stream.
void leave_collectives(kestrel_stream* stream) noexcept;

// ---- profiling (vk_profile.cpp), KESTREL_VULKAN_PROFILE=1 ----

bool profiling();
// Device time per shader from timestamp queries, read when a batch's fence has signalled.
void create_timestamps(kestrel_context* context, Submission& batch);
void begin_timestamps(VkCommandBuffer commands, Submission& batch);  // at the start of a batch
void time_dispatch_start(VkCommandBuffer commands, Submission& batch, const std::string& shader);
void time_dispatch_end(VkCommandBuffer commands, Submission& batch);
void collect_timestamps(kestrel_context* context, Submission& batch);  // after the fence signalled
void print_profile();  // when a context ends

}  // namespace kestrel_vk
