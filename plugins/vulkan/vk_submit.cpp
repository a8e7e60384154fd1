// Command submission: launches are recorded into the stream's open batch and submitted in batches
// (see the execution model in vk_common.hpp). Each stream owns a ring of kSubmissionsInFlight batches;
// a slot is reused once its fence has signalled. While a stream is captured the same code records into
// the graph's chunks instead (vk_capture.hpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "vk_capture.hpp"

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

// Waits for the slot's previous submission and gives it an unsignalled fence.
void reclaim_slot(kestrel_stream* stream, Submission& slot) {
  retire(stream, slot);
  if (slot.fence.use_count() == 1) {
    check(vkResetFences(stream->context->device, 1, &slot.fence->handle), "vkResetFences");
  } else {
    slot.fence = std::make_shared<Fence>(stream->context->device);  // an event still holds the signalled one
  }
}

// Starts recording a batch. Everything submitted earlier on the queue, by any stream, happens before it.
void begin_batch(Submission& slot, VkCommandBufferUsageFlags usage) {
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = usage;
  check(vkBeginCommandBuffer(slot.commands, &begin), "vkBeginCommandBuffer");
  memory_barrier(slot.commands, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT,
                 VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
  begin_timestamps(slot.commands, slot);
  slot.upload_used = 0;
  slot.dispatches = 0;
  slot.recorded = 0;
  slot.open = true;
}

// The batch being recorded: the ring's current slot or, while the stream is captured, the graph's last
// chunk. Null when none is open.
Submission* open_submission(kestrel_stream* stream) {
  Submission* slot = nullptr;
  if (!stream->recording)
    slot = &stream->ring[stream->current];
  else if (!stream->recording->chunks.empty())
    slot = stream->recording->chunks.back().get();
  return slot && slot->open ? slot : nullptr;
}

// The batch being recorded, opening one (after the slot's previous use has finished) when needed.
Submission& open_batch(kestrel_stream* stream) {
  // Stream order: after the collectives issued on it (none while capturing: capture_begin waited, and
  // collectives are refused during a capture).
  if (stream->comm) wait_for_collectives(stream);
  if (stream->recording) return open_chunk(stream->recording);
  Submission& slot = stream->ring[stream->current];
  if (slot.open) return slot;
  reclaim_slot(stream, slot);
  check(vkResetDescriptorPool(stream->context->device, slot.descriptor_pool, 0), "vkResetDescriptorPool");
  check(vkResetCommandBuffer(slot.commands, 0), "vkResetCommandBuffer");
  begin_batch(slot, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
  slot.batch = ++stream->batches_opened;
  stream->progress->recording.store(slot.batch);
  return slot;
}

// A batch's command buffer, descriptor pool and parameter blocks, from `pool`.
void create_batch_objects(kestrel_context* context, VkCommandPool pool, Submission& slot) {
  VkCommandBufferAllocateInfo allocate{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  allocate.commandPool = pool;
  allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(context->device, &allocate, &slot.commands), "vkAllocateCommandBuffers");
  VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, kDispatchesPerSubmit},
                                   {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDispatchesPerSubmit * kMaxBindings}};
  VkDescriptorPoolCreateInfo descriptor_info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  descriptor_info.maxSets = kDispatchesPerSubmit;
  descriptor_info.poolSizeCount = 2;
  descriptor_info.pPoolSizes = sizes;
  check(vkCreateDescriptorPool(context->device, &descriptor_info, nullptr, &slot.descriptor_pool),
        "vkCreateDescriptorPool");
  slot.params = allocate_host_buffer(context, uint64_t(params_stride(context)) * kDispatchesPerSubmit);
}

// Everything but the command buffer, which goes with its pool.
void destroy_batch_objects(VkDevice device, Submission& slot) {
  destroy_host_buffer(slot.params);
  destroy_host_buffer(slot.upload);
  slot.params = slot.upload = nullptr;
  if (slot.timestamps) vkDestroyQueryPool(device, slot.timestamps, nullptr);
  if (slot.descriptor_pool) vkDestroyDescriptorPool(device, slot.descriptor_pool, nullptr);
  slot.timestamps = VK_NULL_HANDLE;
  slot.descriptor_pool = VK_NULL_HANDLE;
  slot.fence.reset();
}

// The open batch's command buffer with a barrier after the previous command, for one more command.
VkCommandBuffer next_command(Submission& slot) {
  if (slot.recorded++ > 0) memory_barrier(slot.commands, kWorkStages, kWrites, kWorkStages, kReadsAndWrites);
  return slot.commands;
}

void record_dispatch(kestrel_stream* stream, const Dispatch& d) {
  kestrel_context* context = stream->context;
  const Submission* open = open_submission(stream);
  if (open && (open->dispatches == kDispatchesPerSubmit || open->recorded >= kCommandsPerSubmit)) flush(stream);
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

// The deferred checks' flag words (flag, value low, value high, extent; see kestrel_stream and
// kestrel_graph): a message for a raised flag, or "" when none is; the words are cleared once read.
struct DeferredCheck {
  const char* value;        // "softmax_cross_entropy: label"
  const char* extent_unit;  // "%u classes"
  const char* consequence;
};
const DeferredCheck kLabelCheck{"softmax_cross_entropy: label", "%u classes",
                                "that launch's loss and gradient rows for the bad labels are NaN"};
const DeferredCheck kCapturedIndexCheck{"gather or scatter_add in a captured graph: index", "an axis of size %u",
                                        "the out-of-range entries were skipped"};

std::string take_deferred_error(uint32_t* words, const DeferredCheck& check) {
  if (!words[0]) return "";
  const int64_t bad = static_cast<int64_t>(uint64_t(words[1]) | (uint64_t(words[2]) << 32));
  char extent[64];
  std::snprintf(extent, sizeof(extent), check.extent_unit, words[3]);
  std::memset(words, 0, 4 * sizeof(uint32_t));
  return std::string(check.value) + " " + std::to_string(bad) + " is out of range for " + extent +
         " (found on the device by an earlier launch on this stream; " + check.consequence + ")";
}

// Raised once the stream is idle: softmax_cross_entropy's label check (words 4..7 of the stream's
// flags and of every graph replayed since the last sync) and the index checks that captured gathers
// and scatter_adds defer (words 0..3 of a graph's flags).
void report_deferred_errors(kestrel_stream* stream) {
  std::string message;  // the first one found; every raised flag is cleared
  auto note = [&](uint32_t* words, const DeferredCheck& check) {
    std::string found = take_deferred_error(words, check);
    if (message.empty()) message = std::move(found);
  };
  if (stream->flags) note(static_cast<uint32_t*>(stream->flags->mapped) + 4, kLabelCheck);
  for (const auto& flags : stream->replayed_flags) {
    uint32_t* words = static_cast<uint32_t*>(flags->mapped);
    note(words, kCapturedIndexCheck);
    note(words + 4, kLabelCheck);
  }
  stream->replayed_flags.clear();
  if (!message.empty()) fail(message);
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
    slot.fence = std::make_shared<Fence>(context->device);
    create_batch_objects(context, stream->command_pool, slot);
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
  for (Submission& slot : stream->ring) destroy_batch_objects(device, slot);
  stream->replayed_flags.clear();
  destroy_host_buffer(stream->readback);
  destroy_host_buffer(stream->flags);
  if (stream->command_pool) vkDestroyCommandPool(device, stream->command_pool, nullptr);
}

void flush(kestrel_stream* stream) {
  Submission* slot = open_submission(stream);
  if (!slot) return;
  // A fence only covers device-side accesses: make the writes visible to host reads (mapped memory).
  memory_barrier(slot->commands, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, kWrites, VK_PIPELINE_STAGE_HOST_BIT,
                 VK_ACCESS_HOST_READ_BIT);
  check(vkEndCommandBuffer(slot->commands), "vkEndCommandBuffer");
  slot->open = false;  // even when the submission fails: the next batch starts afresh
  if (stream->recording) return;  // a chunk of a captured graph: graph_launch submits it
  kestrel_context* context = stream->context;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &slot->commands;
  {
    std::lock_guard<std::mutex> lock(context->queue_mutex);
    check(vkQueueSubmit(context->queue, 1, &submit, slot->fence->handle), "vkQueueSubmit");
  }
  slot->in_flight = true;
  stream->progress->submitted.store(slot->batch);
  stream->current = (stream->current + 1) % kSubmissionsInFlight;
}

Submission& open_chunk(kestrel_graph* graph) {
  if (!graph->chunks.empty() && graph->chunks.back()->open) return *graph->chunks.back();
  kestrel_context* context = graph->context;
  if (!graph->command_pool) {
    VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool_info.queueFamilyIndex = context->physical->compute_queue_family;
    check(vkCreateCommandPool(context->device, &pool_info, nullptr, &graph->command_pool), "vkCreateCommandPool");
  }
  graph->chunks.push_back(std::make_unique<Submission>());  // first, so destroy_chunks frees what gets made
  Submission& chunk = *graph->chunks.back();
  create_batch_objects(context, graph->command_pool, chunk);
  create_timestamps(context, chunk);
  // Replays may overlap (the next is submitted before the previous has finished); the barrier at the
  // start of each chunk keeps them in order.
  begin_batch(chunk, VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT);
  return chunk;
}

void destroy_chunks(kestrel_graph* graph) {
  VkDevice device = graph->context->device;
  for (auto& chunk : graph->chunks) destroy_batch_objects(device, *chunk);
  graph->chunks.clear();
  if (graph->command_pool) vkDestroyCommandPool(device, graph->command_pool, nullptr);  // frees the buffers
  graph->command_pool = VK_NULL_HANDLE;
}

void submit_chunks(kestrel_stream* stream, kestrel_graph* graph) {
  wait_for_collectives(stream);
  flush(stream);  // the stream's earlier work goes first
  Submission& slot = stream->ring[stream->current];
  reclaim_slot(stream, slot);
  slot.timed_shaders.clear();  // its own command buffer is not in this submission: nothing of it to time
  std::vector<VkCommandBuffer> commands;
  for (const auto& chunk : graph->chunks) commands.push_back(chunk->commands);
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = static_cast<uint32_t>(commands.size());
  submit.pCommandBuffers = commands.data();
  kestrel_context* context = stream->context;
  {
    std::lock_guard<std::mutex> lock(context->queue_mutex);
    check(vkQueueSubmit(context->queue, 1, &submit, slot.fence->handle), "vkQueueSubmit");
  }
  // The slot stands for the replay: waiting for the stream, events and stream-ordered frees see it as
  // one more batch of the stream (its own command buffer stays unused until the slot comes round again).
  slot.batch = ++stream->batches_opened;
  stream->progress->recording.store(slot.batch);
  slot.in_flight = true;
  stream->progress->submitted.store(slot.batch);
  stream->current = (stream->current + 1) % kSubmissionsInFlight;
  if (profiling()) {
    // The chunks' timestamps are this replay's only until the next one resets them: read them now.
    retire(stream, slot);
    for (const auto& chunk : graph->chunks) collect_timestamps(context, *chunk);
  }
}

void synchronize(kestrel_stream* stream) {
  wait_for_collectives(stream);
  flush(stream);
  // Oldest first: the slot after `current` was submitted earliest.
  for (uint32_t i = 0; i < kSubmissionsInFlight; ++i)
    retire(stream, stream->ring[(stream->current + i) % kSubmissionsInFlight]);
  for (const std::shared_ptr<Fence>& fence : stream->awaited) wait_fence(*fence);
  stream->awaited.clear();
  report_deferred_errors(stream);
}

std::shared_ptr<Fence> latest_fence(kestrel_stream* stream) {
  const Submission& latest = stream->ring[(stream->current + kSubmissionsInFlight - 1) % kSubmissionsInFlight];
  return latest.in_flight ? latest.fence : nullptr;
}

namespace {
// `groups` workgroups laid out within the device's grid limits.
void set_groups(kestrel_context* context, Dispatch& dispatch, uint64_t groups, uint64_t invocations) {
  const uint32_t* limits = context->physical->properties.limits.maxComputeWorkGroupCount;
  const uint64_t x = std::min<uint64_t>(groups, limits[0]);
  const uint64_t y = (groups + x - 1) / x;
  if (y > limits[1])
    fail("a launch of " + std::to_string(invocations) + " invocations exceeds this Vulkan device's grid limits",
         KESTREL_STATUS_UNSUPPORTED);
  dispatch.groups[0] = static_cast<uint32_t>(x);
  dispatch.groups[1] = static_cast<uint32_t>(y);
  dispatch.groups[2] = 1;
}
}  // namespace

void set_flat_grid(kestrel_context* context, Dispatch& dispatch, uint64_t invocations, int64_t iterations_each) {
  // The shaders loop over elements (flat_stride in common.glsl), so the grid only needs to fill the
  // device. Software devices pay a fixed cost per workgroup: a few per host thread is enough there, until
  // an invocation's items would pass the loop budget (past tens of millions of elements): then as many
  // workgroups as keep each invocation's walk inside it, or its tail would silently go undone.
  const bool software = context->physical->properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  const uint64_t max_groups = software ? std::max(64u, 16u * std::thread::hardware_concurrency()) : 16384u;
  uint64_t groups = std::clamp<uint64_t>((invocations + kLocalSize - 1) / kLocalSize, 1, max_groups);
  if (software) {
    const auto items_each = static_cast<uint64_t>(std::max<int64_t>(1, kMaxLoopIterations / std::max<int64_t>(1, iterations_each)));
    groups = std::max(groups, (invocations + kLocalSize * items_each - 1) / (kLocalSize * items_each));
  }
  set_groups(context, dispatch, groups, invocations);
}

void set_row_grid(kestrel_context* context, Dispatch& dispatch, uint64_t rows) {
  set_groups(context, dispatch, std::max<uint64_t>(1, (rows + kLocalSize - 1) / kLocalSize), rows);
}

void set_workgroup_grid(kestrel_context* context, Dispatch& dispatch, uint64_t groups) {
  set_groups(context, dispatch, std::max<uint64_t>(1, groups), groups * kLocalSize);
}

void run(kestrel_stream* stream, const std::vector<Dispatch>& dispatches) {
  for (const Dispatch& d : dispatches) record_dispatch(stream, d);
}

VkCommandBuffer record_command(kestrel_stream* stream) {
  const Submission* open = open_submission(stream);
  if (open && open->recorded >= kCommandsPerSubmit) flush(stream);
  return next_command(open_batch(stream));
}

UploadSpace reserve_upload(kestrel_stream* stream, uint64_t bytes) {
  const uint64_t want = std::clamp<uint64_t>(bytes, 1, kMaxUploadBytes);
  constexpr uint64_t kAlign = 16;  // keeps vkCmdCopyBuffer offsets tidy
  // The space must be used by commands of this same batch (the slot is recycled when *its* fence
  // signals), so leave room for the two copies a caller records without record_command flushing.
  const Submission* open = open_submission(stream);
  if (open && open->recorded + 2 > kCommandsPerSubmit) flush(stream);
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
