// Command submission: launches are recorded into the stream's open batch and submitted in batches
// (see the execution model in vk_common.hpp). Each stream owns a ring of kSubmissionsInFlight batches;
// a slot is reused once its fence has signalled.
#include <algorithm>
#include <cstring>
#include <thread>

#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

// Copies count as commands but not as dispatches: a batch of copies alone still gets submitted (and
// the ranges freed behind it released) after this many.
constexpr uint32_t kCommandsPerSubmit = 2 * kDispatchesPerSubmit;
constexpr uint64_t kFirstUploadBytes = 1ull << 20;
constexpr uint64_t kMaxUploadBytes = 16ull << 20;  // per batch; bigger copies go in several batches

uint32_t params_stride(const kestrel_context* context) {
  const uint32_t a = context->params_alignment;
  return (static_cast<uint32_t>(sizeof(Params)) + a - 1) / a * a;
}

constexpr VkPipelineStageFlags kWorkStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kReadsAndWrites =
    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

void memory_barrier(VkCommandBuffer commands, VkPipelineStageFlags src_stages, VkAccessFlags src_access,
                    VkPipelineStageFlags dst_stages, VkAccessFlags dst_access) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = src_access;
  barrier.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(commands, src_stages, dst_stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

// Waits for a submitted slot and makes it reusable.
void retire(kestrel_stream* stream, Submission& slot) {
  if (!slot.in_flight) return;
  wait_fence(*slot.fence);
  slot.in_flight = false;
  collect_timestamps(stream->context, slot);
}

// The slot being recorded, opening it (after its previous use has finished) when needed.
Submission& open_batch(kestrel_stream* stream) {
  Submission& slot = stream->ring[stream->current];
  if (slot.open) return slot;
  retire(stream, slot);
  kestrel_context* context = stream->context;
  if (slot.fence.use_count() == 1) {
    check(vkResetFences(context->device, 1, &slot.fence->handle), "vkResetFences");
  } else {
    slot.fence = std::make_shared<Fence>(context->device);  // an event still holds the signalled one
  }
  check(vkResetDescriptorPool(context->device, slot.descriptor_pool, 0), "vkResetDescriptorPool");
  check(vkResetCommandBuffer(slot.commands, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(slot.commands, &begin), "vkBeginCommandBuffer");
  // Everything submitted earlier on the queue, by any stream, happens before this batch.
  memory_barrier(slot.commands, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT,
                 VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
  begin_timestamps(slot.commands, slot);
  slot.upload_used = 0;
  slot.dispatches = 0;
  slot.recorded = 0;
  slot.open = true;
  slot.batch = ++stream->batches_opened;
  stream->progress->recording.store(slot.batch);
  return slot;
}

// The open batch's command buffer with a barrier after the previous command, for one more command.
VkCommandBuffer next_command(Submission& slot) {
  if (slot.recorded++ > 0) memory_barrier(slot.commands, kWorkStages, kWrites, kWorkStages, kReadsAndWrites);
  return slot.commands;
}

void record_dispatch(kestrel_stream* stream, const Dispatch& d) {
  kestrel_context* context = stream->context;
  const Submission& open = stream->ring[stream->current];
  if (open.open && (open.dispatches == kDispatchesPerSubmit || open.recorded >= kCommandsPerSubmit)) flush(stream);
  Submission& slot = open_batch(stream);
  const uint64_t params_offset = uint64_t(slot.dispatches++) * params_stride(context);
  std::memcpy(static_cast<char*>(slot.params->mapped) + params_offset, &d.params, sizeof(Params));

  VkDescriptorSetAllocateInfo allocate{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  allocate.descriptorPool = slot.descriptor_pool;
  allocate.descriptorSetCount = 1;
  allocate.pSetLayouts = &context->set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(context->device, &allocate, &set), "vkAllocateDescriptorSets");
  VkDescriptorBufferInfo infos[kMaxBindings + 1]{};
  infos[0] = {slot.params->buffer, params_offset, sizeof(Params)};
  for (int b = 0; b < kMaxBindings; ++b) {
    const kestrel_buffer* buffer = d.buffers[b] ? d.buffers[b] : context->unused_binding;
    infos[b + 1] = {buffer->buffer, buffer->offset, std::min<uint64_t>(buffer->reserved, context->max_binding_range)};
  }
  VkWriteDescriptorSet writes[kMaxBindings + 1]{};
  for (uint32_t b = 0; b <= kMaxBindings; ++b) {
    writes[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[b].dstSet = set;
    writes[b].dstBinding = b;
    writes[b].descriptorCount = 1;
    writes[b].descriptorType = b == 0 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[b].pBufferInfo = &infos[b];
  }
  vkUpdateDescriptorSets(context->device, kMaxBindings + 1, writes, 0, nullptr);

  VkCommandBuffer commands = next_command(slot);
  vkCmdBindPipeline(commands, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline(context, d.shader));
  vkCmdBindDescriptorSets(commands, VK_PIPELINE_BIND_POINT_COMPUTE, context->pipeline_layout, 0, 1, &set, 0, nullptr);
  time_dispatch_start(commands, slot, d.shader);
  vkCmdDispatch(commands, d.groups[0], d.groups[1], d.groups[2]);
  time_dispatch_end(commands, slot);
}

// softmax_cross_entropy's label check (flags words 4..7, see kestrel_stream): raised once the stream
// is idle, then cleared.
void report_deferred_error(kestrel_stream* stream) {
  if (!stream->flags) return;
  uint32_t* words = static_cast<uint32_t*>(stream->flags->mapped) + 4;
  if (!words[0]) return;
  const int64_t bad = static_cast<int64_t>(uint64_t(words[1]) | (uint64_t(words[2]) << 32));
  const uint32_t classes = words[3];
  std::memset(words, 0, 4 * sizeof(uint32_t));
  fail("softmax_cross_entropy: label " + std::to_string(bad) + " is out of range for " + std::to_string(classes) +
       " classes (found on the device by an earlier launch on this stream; that launch's loss and gradient "
       "rows for the bad labels are NaN)");
}

}  // namespace

Fence::Fence(VkDevice d) : device(d) {
  VkFenceCreateInfo info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vkCreateFence(device, &info, nullptr, &handle), "vkCreateFence");
}

Fence::~Fence() {
  if (handle) vkDestroyFence(device, handle, nullptr);
}

void wait_fence(const Fence& fence) {
  check(vkWaitForFences(fence.device, 1, &fence.handle, VK_TRUE, UINT64_MAX), "vkWaitForFences");
}

void create_stream_objects(kestrel_stream* stream) {
  kestrel_context* context = stream->context;
  stream->progress = std::make_shared<StreamProgress>();
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = context->physical->compute_queue_family;
  check(vkCreateCommandPool(context->device, &pool_info, nullptr, &stream->command_pool), "vkCreateCommandPool");
  for (Submission& slot : stream->ring) {
    VkCommandBufferAllocateInfo allocate{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    allocate.commandPool = stream->command_pool;
    allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    allocate.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(context->device, &allocate, &slot.commands), "vkAllocateCommandBuffers");
    slot.fence = std::make_shared<Fence>(context->device);
    VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, kDispatchesPerSubmit},
                                     {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDispatchesPerSubmit * kMaxBindings}};
    VkDescriptorPoolCreateInfo descriptor_info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    descriptor_info.maxSets = kDispatchesPerSubmit;
    descriptor_info.poolSizeCount = 2;
    descriptor_info.pPoolSizes = sizes;
    check(vkCreateDescriptorPool(context->device, &descriptor_info, nullptr, &slot.descriptor_pool),
          "vkCreateDescriptorPool");
    slot.params = allocate_host_buffer(context, uint64_t(params_stride(context)) * kDispatchesPerSubmit);
    create_timestamps(context, slot);
  }
  std::lock_guard<std::mutex> lock(context->streams_mutex);
  context->streams.push_back(stream->progress);
}

void destroy_stream_objects(kestrel_stream* stream) {
  kestrel_context* context = stream->context;
  VkDevice device = context->device;
  try {
    flush(stream);
    for (Submission& slot : stream->ring) retire(stream, slot);  // also collects profile timestamps
  } catch (const std::exception&) {
    // a lost device or a batch that cannot be submitted: nothing more can be waited for
    vkDeviceWaitIdle(device);
  }
  if (stream->progress) {
    // Nothing of this stream is pending any more: ranges freed while it was busy may be reused.
    stream->progress->submitted.store(UINT64_MAX);
    std::lock_guard<std::mutex> lock(context->streams_mutex);
    auto& streams = context->streams;
    streams.erase(std::remove(streams.begin(), streams.end(), stream->progress), streams.end());
  }
  for (Submission& slot : stream->ring) {
    destroy_host_buffer(slot.params);
    destroy_host_buffer(slot.upload);
    if (slot.timestamps) vkDestroyQueryPool(device, slot.timestamps, nullptr);
    if (slot.descriptor_pool) vkDestroyDescriptorPool(device, slot.descriptor_pool, nullptr);
    slot.fence.reset();
  }
  destroy_host_buffer(stream->readback);
  destroy_host_buffer(stream->flags);
  if (stream->command_pool) vkDestroyCommandPool(device, stream->command_pool, nullptr);
}

void flush(kestrel_stream* stream) {
  Submission& slot = stream->ring[stream->current];
  if (!slot.open) return;
  // A fence only covers device-side accesses: make the writes visible to host reads (mapped memory).
  memory_barrier(slot.commands, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, kWrites, VK_PIPELINE_STAGE_HOST_BIT,
                 VK_ACCESS_HOST_READ_BIT);
  check(vkEndCommandBuffer(slot.commands), "vkEndCommandBuffer");
  slot.open = false;  // even when the submission fails: the next batch starts afresh
  kestrel_context* context = stream->context;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &slot.commands;
  {
    std::lock_guard<std::mutex> lock(context->queue_mutex);
    check(vkQueueSubmit(context->queue, 1, &submit, slot.fence->handle), "vkQueueSubmit");
  }
  slot.in_flight = true;
  stream->progress->submitted.store(slot.batch);
  stream->current = (stream->current + 1) % kSubmissionsInFlight;
}

void synchronize(kestrel_stream* stream) {
  flush(stream);
  // Oldest first: the slot after `current` was submitted earliest.
  for (uint32_t i = 0; i < kSubmissionsInFlight; ++i)
    retire(stream, stream->ring[(stream->current + i) % kSubmissionsInFlight]);
  report_deferred_error(stream);
}

std::shared_ptr<Fence> latest_fence(kestrel_stream* stream) {
  const Submission& latest = stream->ring[(stream->current + kSubmissionsInFlight - 1) % kSubmissionsInFlight];
  return latest.in_flight ? latest.fence : nullptr;
}

void set_flat_grid(kestrel_context* context, Dispatch& dispatch, uint64_t invocations) {
  const uint32_t* limits = context->physical->properties.limits.maxComputeWorkGroupCount;
  // The shaders loop over elements (flat_stride in common.glsl), so the grid only needs to fill the
  // device. Software devices pay a fixed cost per workgroup: a few per host thread is enough there.
  const bool software = context->physical->properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  const uint64_t max_groups = software ? std::max(64u, 16u * std::thread::hardware_concurrency()) : 16384u;
  const uint64_t groups = std::clamp<uint64_t>((invocations + kLocalSize - 1) / kLocalSize, 1, max_groups);
  const uint64_t x = std::min<uint64_t>(groups, limits[0]);
  const uint64_t y = (groups + x - 1) / x;
  if (y > limits[1])
    fail("a launch of " + std::to_string(invocations) + " invocations exceeds this Vulkan device's grid limits",
         KESTREL_STATUS_UNSUPPORTED);
  dispatch.groups[0] = static_cast<uint32_t>(x);
  dispatch.groups[1] = static_cast<uint32_t>(y);
  dispatch.groups[2] = 1;
}

void run(kestrel_stream* stream, const std::vector<Dispatch>& dispatches) {
  for (const Dispatch& d : dispatches) record_dispatch(stream, d);
}

VkCommandBuffer record_command(kestrel_stream* stream) {
  if (stream->ring[stream->current].open && stream->ring[stream->current].recorded >= kCommandsPerSubmit) flush(stream);
  return next_command(open_batch(stream));
}

UploadSpace reserve_upload(kestrel_stream* stream, uint64_t bytes) {
  const uint64_t want = std::clamp<uint64_t>(bytes, 1, kMaxUploadBytes);
  constexpr uint64_t kAlign = 16;  // keeps vkCmdCopyBuffer offsets tidy
  // The space must be used by commands of this same batch (the slot is recycled when *its* fence
  // signals), so leave room for the two copies a caller records without record_command flushing.
  if (stream->ring[stream->current].open && stream->ring[stream->current].recorded + 2 > kCommandsPerSubmit)
    flush(stream);
  Submission* slot = &open_batch(stream);
  uint64_t start = (slot->upload_used + kAlign - 1) / kAlign * kAlign;
  if (start > 0 && (!slot->upload || start >= slot->upload->reserved || slot->upload->reserved - start < want)) {
    flush(stream);  // this batch's space is taken: continue in a fresh batch
    slot = &open_batch(stream);
    start = 0;
  }
  if (start == 0 && (!slot->upload || slot->upload->reserved < want)) {
    // Nothing recorded in this batch uses its space yet, and the slot's previous use has finished.
    destroy_host_buffer(slot->upload);
    slot->upload = nullptr;
    slot->upload = allocate_host_buffer(stream->context, std::clamp(want, kFirstUploadBytes, kMaxUploadBytes));
  }
  const uint64_t granted = std::min(want, slot->upload->reserved - start);
  slot->upload_used = start + granted;
  return {slot->upload, start, granted};
}

}  // namespace kestrel_vk
