// Buffers and copies. Every buffer is one VkBuffer with its own VkDeviceMemory in the device-local
// memory type; freed buffers are cached by size (training allocates the same shapes each step) until
// memory_trim. When the device-local type is also host-visible and coherent (integrated GPUs,
// lavapipe) copies are plain memcpy on the persistent mapping; otherwise they bounce through the
// stream's host-visible staging buffer with vkCmdCopyBuffer. KESTREL_VULKAN_FORCE_STAGING=1 forces the
// staging path everywhere, so it can be tested on a machine where everything is host-visible.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

constexpr uint64_t kAlignment = 256;  // >= every minStorageBufferOffsetAlignment in practice; ABI wants 64
constexpr uint64_t kMaxStagingBytes = 64ull << 20;

uint64_t round_up(uint64_t bytes) { return (std::max<uint64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment; }

constexpr VkMemoryPropertyFlags kHostCoherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

uint32_t find_memory_type(const PhysicalDevice& d, uint32_t allowed, VkMemoryPropertyFlags wanted, bool& found) {
  for (uint32_t t = 0; t < d.memory.memoryTypeCount; ++t)
    if ((allowed & (1u << t)) && (d.memory.memoryTypes[t].propertyFlags & wanted) == wanted) {
      found = true;
      return t;
    }
  found = false;
  return 0;
}

const VkBufferUsageFlags kUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
// Host-visible helper buffers also carry the shaders' parameter blocks (a uniform buffer).
const VkBufferUsageFlags kHostUsage = kUsage | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT;

// Creates the buffer and its memory; returns null (and cleans up) when the driver is out of memory.
kestrel_buffer* try_create(kestrel_context* context, uint64_t reserved, uint32_t memory_type, bool map,
                           VkBufferUsageFlags usage = kUsage) {
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = reserved;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkResult status = vkCreateBuffer(context->device, &info, nullptr, &buffer);
  if (status == VK_ERROR_OUT_OF_HOST_MEMORY || status == VK_ERROR_OUT_OF_DEVICE_MEMORY) return nullptr;
  check(status, "vkCreateBuffer");
  VkMemoryRequirements requirements{};
  vkGetBufferMemoryRequirements(context->device, buffer, &requirements);
  VkMemoryAllocateInfo allocate{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  allocate.allocationSize = requirements.size;
  allocate.memoryTypeIndex = memory_type;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  status = vkAllocateMemory(context->device, &allocate, nullptr, &memory);
  if (status != VK_SUCCESS) {
    vkDestroyBuffer(context->device, buffer, nullptr);
    if (status == VK_ERROR_OUT_OF_HOST_MEMORY || status == VK_ERROR_OUT_OF_DEVICE_MEMORY) return nullptr;
    check(status, "vkAllocateMemory");
  }
  check(vkBindBufferMemory(context->device, buffer, memory, 0), "vkBindBufferMemory");
  void* mapped = nullptr;
  if (map) check(vkMapMemory(context->device, memory, 0, VK_WHOLE_SIZE, 0, &mapped), "vkMapMemory");
  return new kestrel_buffer{context, buffer, memory, reserved, reserved, mapped};
}

void destroy_now(kestrel_buffer* buffer) {
  VkDevice device = buffer->context->device;
  if (buffer->mapped) vkUnmapMemory(device, buffer->memory);
  vkDestroyBuffer(device, buffer->buffer, nullptr);
  vkFreeMemory(device, buffer->memory, nullptr);
  delete buffer;
}

// The stream's staging buffer, grown to hold min(bytes, kMaxStagingBytes); returns its usable size.
uint64_t ensure_staging(kestrel_stream* stream, uint64_t bytes) {
  const uint64_t want = std::min(std::max<uint64_t>(bytes, 1 << 20), kMaxStagingBytes);
  if (!stream->staging || stream->staging->reserved < want) {
    if (stream->staging) destroy_buffer(stream->staging);
    stream->staging = nullptr;
    stream->staging = allocate_host_buffer(stream->context, want);
  }
  return stream->staging->reserved;
}

void record_copy(VkCommandBuffer commands, VkBuffer src, uint64_t src_offset, VkBuffer dst, uint64_t dst_offset,
                 uint64_t bytes) {
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(commands, src, dst, 1, &region);
}

void transfer_barrier(VkCommandBuffer commands) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(commands, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &barrier, 0,
                       nullptr, 0, nullptr);
}

}  // namespace

void choose_memory_types(kestrel_context* context) {
  const PhysicalDevice& d = *context->physical;
  // Which memory types a storage buffer may live in: ask the driver about a small probe buffer.
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = kAlignment;
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
  const char* force = std::getenv("KESTREL_VULKAN_FORCE_STAGING");
  context->device_memory_mapped = (flags & kHostCoherent) == kHostCoherent && !(force && std::strcmp(force, "1") == 0);
  context->max_binding_range = d.properties.limits.maxStorageBufferRange;
  context->params_alignment =
      static_cast<uint32_t>(std::max<VkDeviceSize>(kAlignment, d.properties.limits.minUniformBufferOffsetAlignment));
}

kestrel_buffer* allocate_buffer(kestrel_context* context, uint64_t bytes) {
  const uint64_t reserved = round_up(bytes);
  kestrel_buffer* buffer = nullptr;
  {
    std::lock_guard<std::mutex> lock(context->memory_mutex);
    auto cached = context->free_buffers.find(reserved);
    if (cached != context->free_buffers.end()) {
      buffer = cached->second;
      context->free_buffers.erase(cached);
      context->cached -= reserved;
    }
  }
  if (!buffer) {
    buffer = try_create(context, reserved, context->device_memory_type, context->device_memory_mapped);
    if (!buffer) {  // give the cache back to the driver and try once more
      trim_cache(context);
      buffer = try_create(context, reserved, context->device_memory_type, context->device_memory_mapped);
    }
    if (!buffer)
      fail("out of device memory allocating " + std::to_string(bytes) +
               " bytes on the Vulkan device; use a smaller batch or model",
           KESTREL_STATUS_OUT_OF_MEMORY);
  }
  buffer->bytes = bytes;
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  context->allocated += reserved;
  context->count += 1;
  context->peak = std::max(context->peak, context->allocated);
  return buffer;
}

void release_buffer(kestrel_buffer* buffer) {
  kestrel_context* context = buffer->context;
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  context->allocated -= buffer->reserved;
  context->count -= 1;
  context->cached += buffer->reserved;
  context->free_buffers.emplace(buffer->reserved, buffer);
}

void destroy_buffer(kestrel_buffer* buffer) {
  if (buffer) destroy_now(buffer);
}

kestrel_buffer* allocate_host_buffer(kestrel_context* context, uint64_t bytes) {
  kestrel_buffer* buffer = try_create(context, round_up(bytes), context->staging_memory_type, true, kHostUsage);
  if (!buffer)
    fail("out of host-visible memory allocating a " + std::to_string(bytes) + "-byte Vulkan staging buffer",
         KESTREL_STATUS_OUT_OF_MEMORY);
  buffer->bytes = bytes;
  return buffer;
}

void trim_cache(kestrel_context* context) {
  std::multimap<uint64_t, kestrel_buffer*> released;
  {
    std::lock_guard<std::mutex> lock(context->memory_mutex);
    released.swap(context->free_buffers);
    context->cached = 0;
  }
  for (auto& entry : released) destroy_now(entry.second);
}

void copy_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t offset, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  if (dst->mapped) {  // every earlier launch has completed (see vk_common.hpp), so the memory is ours
    std::memcpy(static_cast<char*>(dst->mapped) + offset, src, bytes);
    return;
  }
  const uint64_t chunk = ensure_staging(stream, bytes);
  for (uint64_t done = 0; done < bytes; done += chunk) {
    const uint64_t n = std::min(chunk, bytes - done);
    std::memcpy(stream->staging->mapped, static_cast<const char*>(src) + done, n);
    submit_and_wait(stream, [&](VkCommandBuffer commands) {
      record_copy(commands, stream->staging->buffer, 0, dst->buffer, offset + done, n);
    });
  }
}

void copy_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  if (src->mapped) {
    std::memcpy(dst, static_cast<const char*>(src->mapped) + offset, bytes);
    return;
  }
  const uint64_t chunk = ensure_staging(stream, bytes);
  for (uint64_t done = 0; done < bytes; done += chunk) {
    const uint64_t n = std::min(chunk, bytes - done);
    submit_and_wait(stream, [&](VkCommandBuffer commands) {
      record_copy(commands, src->buffer, offset + done, stream->staging->buffer, 0, n);
    });
    std::memcpy(static_cast<char*>(dst) + done, stream->staging->mapped, n);
  }
}

void copy_on_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, kestrel_buffer* src,
                    uint64_t src_offset, uint64_t bytes) {
  if (bytes == 0) return;
  const bool overlap = dst == src && dst_offset < src_offset + bytes && src_offset < dst_offset + bytes;
  if (!overlap) {
    submit_and_wait(stream, [&](VkCommandBuffer commands) {
      record_copy(commands, src->buffer, src_offset, dst->buffer, dst_offset, bytes);
    });
    return;
  }
  // vkCmdCopyBuffer forbids overlapping regions; memmove semantics go through the staging buffer, in
  // chunks ordered so that no chunk overwrites source bytes not yet copied.
  const uint64_t chunk = ensure_staging(stream, bytes);
  const bool forward = dst_offset < src_offset;
  for (uint64_t done = 0; done < bytes; done += chunk) {
    const uint64_t n = std::min(chunk, bytes - done);
    const uint64_t at = forward ? done : bytes - done - n;
    submit_and_wait(stream, [&](VkCommandBuffer commands) {
      record_copy(commands, src->buffer, src_offset + at, stream->staging->buffer, 0, n);
      transfer_barrier(commands);
      record_copy(commands, stream->staging->buffer, 0, dst->buffer, dst_offset + at, n);
    });
  }
}

}  // namespace kestrel_vk
