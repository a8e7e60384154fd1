// Device memory. Drivers cap the number of VkDeviceMemory allocations (maxMemoryAllocationCount, often
// 4096), so buffers are ranges inside large blocks: each block is one VkDeviceMemory with one VkBuffer
// over all of it (kBlockBytes, or a bigger request on its own), and a kestrel_buffer is that VkBuffer
// plus an offset, which descriptors and copies use. Free ranges are kept per block (coalesced with
// their neighbours) and in one size-ordered set for best fit.
//
// buffer_free is stream-ordered (see vk_common.hpp): the freed range waits, tagged with every stream's
// open batch, until those batches are submitted; after that the queue runs any later user after them.
// Blocks go back to the driver only in trim_memory, after the queue is idle.
//
// While a thread captures a stream (vk_capture.hpp), its allocations take the graph's held ranges
// first and its frees go to the graph: its replays may still use that memory. The ranges stay in their
// blocks, so `reserved` keeps counting them and trim_memory keeps those blocks.
//
// Helper buffers (parameter blocks, staging, flags) are host-visible, few, and have their own memory.
// KESTREL_VULKAN_FORCE_STAGING=1 treats device memory as unmappable, so the bounce-buffer reads are
// tested on machines where everything is host-visible.
#include <algorithm>
#include <set>
#include <tuple>

#include "kestrel/plugin_env.hpp"
#include "vk_capture.hpp"

namespace kestrel_vk {

struct MemoryBlock {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t size = 0;
  char* mapped = nullptr;
  std::map<uint64_t, uint64_t> free_ranges;  // offset -> bytes; never two adjacent ones
  uint64_t free_bytes = 0;
};

// A freed range waiting for the batches that were open when it was freed.
struct PendingRange {
  MemoryBlock* block;
  uint64_t offset, bytes;
  std::vector<std::pair<std::shared_ptr<StreamProgress>, uint64_t>> waits;  // stream, batch id
};

struct MemoryBlocks {
  std::vector<std::unique_ptr<MemoryBlock>> blocks;
  std::set<std::tuple<uint64_t, MemoryBlock*, uint64_t>> by_size;  // (bytes, block, offset) of each free range
  std::vector<PendingRange> pending;
  uint64_t allocated = 0, reserved = 0, peak = 0, count = 0;
};

namespace {

constexpr uint64_t kBlockBytes = 64ull << 20;
constexpr VkMemoryPropertyFlags kHostCoherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
const VkBufferUsageFlags kUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
// Host-visible helper buffers also carry the shaders' parameter blocks (a uniform buffer).
const VkBufferUsageFlags kHostUsage = kUsage | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT;

uint64_t round_up(uint64_t bytes, uint64_t alignment) {
  return (std::max<uint64_t>(bytes, 1) + alignment - 1) / alignment * alignment;
}

bool out_of_memory(VkResult status) {
  return status == VK_ERROR_OUT_OF_HOST_MEMORY || status == VK_ERROR_OUT_OF_DEVICE_MEMORY;
}

uint32_t find_memory_type(const PhysicalDevice& d, uint32_t allowed, VkMemoryPropertyFlags wanted, bool& found) {
  for (uint32_t t = 0; t < d.memory.memoryTypeCount; ++t)
    if ((allowed & (1u << t)) && (d.memory.memoryTypes[t].propertyFlags & wanted) == wanted) {
      found = true;
      return t;
    }
  found = false;
  return 0;
}

// A VkBuffer over new memory of `bytes`, mapped when asked; false (nothing left behind) when the driver
// is out of memory.
bool create_memory_buffer(kestrel_context* context, uint64_t bytes, uint32_t memory_type, bool map,
                          VkBufferUsageFlags usage, VkBuffer& buffer, VkDeviceMemory& memory, void*& mapped) {
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = bytes;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  buffer = VK_NULL_HANDLE;
  memory = VK_NULL_HANDLE;
  mapped = nullptr;
  VkResult status = vkCreateBuffer(context->device, &info, nullptr, &buffer);
  if (out_of_memory(status)) return false;
  check(status, "vkCreateBuffer");
  VkMemoryRequirements requirements{};
  vkGetBufferMemoryRequirements(context->device, buffer, &requirements);
  VkMemoryAllocateInfo allocate{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  allocate.allocationSize = requirements.size;
  allocate.memoryTypeIndex = memory_type;
  status = vkAllocateMemory(context->device, &allocate, nullptr, &memory);
  if (status != VK_SUCCESS) {
    vkDestroyBuffer(context->device, buffer, nullptr);
    buffer = VK_NULL_HANDLE;
    if (out_of_memory(status)) return false;
    check(status, "vkAllocateMemory");
  }
  check(vkBindBufferMemory(context->device, buffer, memory, 0), "vkBindBufferMemory");
  if (map) check(vkMapMemory(context->device, memory, 0, VK_WHOLE_SIZE, 0, &mapped), "vkMapMemory");
  return true;
}

void destroy_memory_buffer(VkDevice device, VkBuffer buffer, VkDeviceMemory memory, bool mapped) {
  if (mapped) vkUnmapMemory(device, memory);
  vkDestroyBuffer(device, buffer, nullptr);
  vkFreeMemory(device, memory, nullptr);
}

// ---- free lists (the caller holds memory_mutex) ----

void add_free(MemoryBlocks& m, MemoryBlock* block, uint64_t offset, uint64_t bytes) {
  block->free_bytes += bytes;
  auto next = block->free_ranges.lower_bound(offset);
  if (next != block->free_ranges.end() && offset + bytes == next->first) {  // merge with the range after
    m.by_size.erase({next->second, block, next->first});
    bytes += next->second;
    next = block->free_ranges.erase(next);
  }
  if (next != block->free_ranges.begin()) {  // merge with the range before
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      m.by_size.erase({previous->second, block, previous->first});
      offset = previous->first;
      bytes += previous->second;
      block->free_ranges.erase(previous);
    }
  }
  block->free_ranges.emplace(offset, bytes);
  m.by_size.emplace(bytes, block, offset);
}

// Takes `bytes` from the start of the free range (block, offset, range_bytes).
void take(MemoryBlocks& m, MemoryBlock* block, uint64_t offset, uint64_t range_bytes, uint64_t bytes) {
  m.by_size.erase({range_bytes, block, offset});
  block->free_ranges.erase(offset);
  block->free_bytes -= range_bytes;
  if (range_bytes > bytes) add_free(m, block, offset + bytes, range_bytes - bytes);
}

bool batches_submitted(const PendingRange& range) {
  for (const auto& [progress, batch] : range.waits)
    if (progress->submitted.load() < batch) return false;
  return true;
}

void reclaim_pending(MemoryBlocks& m) {
  auto ready = std::stable_partition(m.pending.begin(), m.pending.end(),
                                     [](const PendingRange& r) { return !batches_submitted(r); });
  for (auto it = ready; it != m.pending.end(); ++it) add_free(m, it->block, it->offset, it->bytes);
  m.pending.erase(ready, m.pending.end());
}

MemoryBlock* create_block(kestrel_context* context, uint64_t bytes) {
  auto block = std::make_unique<MemoryBlock>();
  void* mapped = nullptr;
  if (!create_memory_buffer(context, bytes, context->device_memory_type, context->device_memory_mapped, kUsage,
                            block->buffer, block->memory, mapped))
    return nullptr;
  block->size = bytes;
  block->mapped = static_cast<char*>(mapped);
  MemoryBlocks& m = *context->memory;
  m.reserved += bytes;
  add_free(m, block.get(), 0, bytes);
  m.blocks.push_back(std::move(block));
  return m.blocks.back().get();
}

// A range of `reserved` bytes from the free lists or a new block; false when the driver is out of memory.
bool take_free(kestrel_context* context, uint64_t reserved, HeldRange& range) {
  MemoryBlocks& m = *context->memory;
  reclaim_pending(m);
  auto fit = m.by_size.lower_bound({reserved, nullptr, 0});
  if (fit == m.by_size.end()) {
    if (!create_block(context, std::max(kBlockBytes, reserved))) return false;
    fit = m.by_size.lower_bound({reserved, nullptr, 0});
  }
  const auto [range_bytes, block, offset] = *fit;
  take(m, block, offset, range_bytes, reserved);
  range = {block, offset, reserved};
  return true;
}

// The best-fitting range the graph holds, split when larger; false when it holds none big enough.
bool take_held(kestrel_graph& graph, uint64_t reserved, HeldRange& range) {
  auto fit = graph.pool.lower_bound(reserved);
  if (fit == graph.pool.end()) return false;
  const HeldRange found = fit->second;
  graph.pool.erase(fit);
  if (found.bytes > reserved)
    graph.pool.emplace(found.bytes - reserved, HeldRange{found.block, found.offset + reserved, found.bytes - reserved});
  range = {found.block, found.offset, reserved};
  return true;
}

// A buffer of `reserved` bytes; null when the driver is out of memory.
kestrel_buffer* try_allocate(kestrel_context* context, uint64_t bytes, uint64_t reserved) {
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  MemoryBlocks& m = *context->memory;
  kestrel_graph* graph = capture_of_this_thread(context);
  HeldRange range{};
  if (!(graph && take_held(*graph, reserved, range)) && !take_free(context, reserved, range)) return nullptr;
  m.allocated += reserved;
  m.count += 1;
  m.peak = std::max(m.peak, m.allocated);
  auto* buffer = new kestrel_buffer();
  buffer->context = context;
  buffer->buffer = range.block->buffer;
  buffer->offset = range.offset;
  buffer->bytes = bytes;
  buffer->reserved = reserved;
  buffer->mapped = range.block->mapped ? range.block->mapped + range.offset : nullptr;
  buffer->block = range.block;
  if (graph) graph->live.insert(buffer);
  return buffer;
}

// The streams' open batches now: a range freed now waits until they are submitted.
std::vector<std::pair<std::shared_ptr<StreamProgress>, uint64_t>> open_batches(kestrel_context* context) {
  std::vector<std::pair<std::shared_ptr<StreamProgress>, uint64_t>> waits;
  std::lock_guard<std::mutex> lock(context->streams_mutex);
  for (const auto& progress : context->streams) {
    const uint64_t open = progress->recording.load();
    if (open > progress->submitted.load()) waits.emplace_back(progress, open);
  }
  return waits;
}

void free_stream_ordered(MemoryBlocks& m, PendingRange range) {
  if (range.waits.empty())
    add_free(m, range.block, range.offset, range.bytes);
  else
    m.pending.push_back(std::move(range));
}

}  // namespace

void choose_memory_types(kestrel_context* context) {
  const PhysicalDevice& d = *context->physical;
  // Which memory types a storage buffer may live in: ask the driver about a small probe buffer.
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = 256;
  info.usage = kUsage;
  VkBuffer probe = VK_NULL_HANDLE;
  check(vkCreateBuffer(context->device, &info, nullptr, &probe), "vkCreateBuffer");
  VkMemoryRequirements requirements{};
  vkGetBufferMemoryRequirements(context->device, probe, &requirements);
  vkDestroyBuffer(context->device, probe, nullptr);

  bool found = false;
  context->staging_memory_type = find_memory_type(d, requirements.memoryTypeBits, kHostCoherent, found);
  if (!found) fail("this Vulkan device has no host-visible coherent memory for copies", KESTREL_STATUS_UNSUPPORTED);
  context->device_memory_type =
      find_memory_type(d, requirements.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, found);
  if (!found) context->device_memory_type = context->staging_memory_type;
  const VkMemoryPropertyFlags flags = d.memory.memoryTypes[context->device_memory_type].propertyFlags;
  context->device_memory_mapped =
      (flags & kHostCoherent) == kHostCoherent && !kestrel::plugin_env::flag("KESTREL_VULKAN_FORCE_STAGING");
  context->max_binding_range = d.properties.limits.maxStorageBufferRange;
  const VkPhysicalDeviceLimits& limits = d.properties.limits;
  context->params_alignment = static_cast<uint32_t>(std::max<VkDeviceSize>(256, limits.minUniformBufferOffsetAlignment));
  // Buffers start where a storage descriptor may point; 256 also covers the ABI's 64 bytes.
  context->buffer_alignment = std::max<VkDeviceSize>(256, limits.minStorageBufferOffsetAlignment);
}

void create_memory(kestrel_context* context) { context->memory = new MemoryBlocks(); }

void destroy_memory(kestrel_context* context) {
  if (!context->memory) return;
  for (auto& block : context->memory->blocks)
    destroy_memory_buffer(context->device, block->buffer, block->memory, block->mapped != nullptr);
  delete context->memory;
  context->memory = nullptr;
}

kestrel_buffer* allocate_buffer(kestrel_context* context, uint64_t bytes) {
  const uint64_t reserved = round_up(bytes, context->buffer_alignment);
  kestrel_buffer* buffer = try_allocate(context, bytes, reserved);
  if (!buffer) {  // give fully free blocks back to the driver and try once more
    trim_memory(context);
    buffer = try_allocate(context, bytes, reserved);
  }
  if (!buffer)
    fail("out of device memory allocating " + std::to_string(bytes) +
             " bytes on the Vulkan device; use a smaller batch or model",
         KESTREL_STATUS_OUT_OF_MEMORY);
  return buffer;
}

void release_buffer(kestrel_buffer* buffer) {
  kestrel_context* context = buffer->context;
  PendingRange range{buffer->block, buffer->offset, buffer->reserved, open_batches(context)};
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  MemoryBlocks& m = *context->memory;
  m.allocated -= buffer->reserved;
  m.count -= 1;
  if (kestrel_graph* graph = capture_of_this_thread(context)) {
    // Freed inside a capture: the recorded commands may use the range, so it is the graph's now.
    graph->live.erase(buffer);
    graph->pool.emplace(range.bytes, HeldRange{range.block, range.offset, range.bytes});
  } else {
    free_stream_ordered(m, std::move(range));
  }
  delete buffer;
}

kestrel_graph* capture_of_this_thread(const kestrel_context* context) {
  return context->capturing && context->capture_thread == std::this_thread::get_id() ? context->capturing : nullptr;
}

void return_graph_memory(kestrel_context* context, kestrel_graph* graph) {
  auto waits = open_batches(context);
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  for (const auto& [bytes, held] : graph->pool)
    free_stream_ordered(*context->memory, PendingRange{held.block, held.offset, held.bytes, waits});
  graph->pool.clear();
}

void trim_memory(kestrel_context* context) {
  // Ranges in the free lists may still be used by submitted work until the queue is idle; holding the
  // queue lock keeps anything new from being submitted until the blocks are gone.
  std::lock_guard<std::mutex> queue_lock(context->queue_mutex);
  check(vkQueueWaitIdle(context->queue), "vkQueueWaitIdle");
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  MemoryBlocks& m = *context->memory;
  reclaim_pending(m);
  auto keep = std::stable_partition(m.blocks.begin(), m.blocks.end(),
                                    [](const auto& block) { return block->free_bytes != block->size; });
  for (auto it = keep; it != m.blocks.end(); ++it) {
    MemoryBlock* block = it->get();
    m.by_size.erase({block->size, block, 0});
    m.reserved -= block->size;
    destroy_memory_buffer(context->device, block->buffer, block->memory, block->mapped != nullptr);
  }
  m.blocks.erase(keep, m.blocks.end());
}

void memory_statistics(kestrel_context* context, kestrel_memory_stats* stats) {
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  const MemoryBlocks& m = *context->memory;
  stats->allocated = m.allocated;
  stats->reserved = m.reserved;
  stats->peak_allocated = m.peak;
  stats->alloc_count = m.count;
}

void reset_peak(kestrel_context* context) {
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  context->memory->peak = context->memory->allocated;
}

kestrel_buffer* allocate_host_buffer(kestrel_context* context, uint64_t bytes) {
  auto* buffer = new kestrel_buffer();
  buffer->context = context;
  buffer->bytes = bytes;
  buffer->reserved = round_up(bytes, 256);
  if (!create_memory_buffer(context, buffer->reserved, context->staging_memory_type, true, kHostUsage, buffer->buffer,
                            buffer->own_memory, buffer->mapped)) {
    delete buffer;
    fail("out of host-visible memory allocating a " + std::to_string(bytes) + "-byte Vulkan staging buffer",
         KESTREL_STATUS_OUT_OF_MEMORY);
  }
  return buffer;
}

void destroy_host_buffer(kestrel_buffer* buffer) {
  if (!buffer) return;
  destroy_memory_buffer(buffer->context->device, buffer->buffer, buffer->own_memory, true);
  delete buffer;
}

}  // namespace kestrel_vk
