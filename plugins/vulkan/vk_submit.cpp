// Command submission: each stream owns a command buffer, a fence, a descriptor pool and a small
// host-visible ring of parameter blocks. A submission records, submits, and waits for the fence
// (see vk_common.hpp for why everything is synchronous).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

constexpr uint32_t kDispatchesPerSubmit = 64;

uint32_t params_stride(const kestrel_context* context) {
  const uint32_t a = context->params_alignment;
  return (static_cast<uint32_t>(sizeof(Params)) + a - 1) / a * a;
}

void compute_barrier(VkCommandBuffer commands) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                       &barrier, 0, nullptr, 0, nullptr);
}

// KESTREL_VULKAN_PROFILE=1: wall time per shader (submission included), printed when a context ends.
struct ShaderTime {
  double seconds = 0;
  uint64_t launches = 0;
};
bool profiling() {
  static const bool enabled = [] {
    const char* value = std::getenv("KESTREL_VULKAN_PROFILE");
    return value && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}
std::mutex& profile_mutex = *new std::mutex;
std::map<std::string, ShaderTime>& profile = *new std::map<std::string, ShaderTime>;

}  // namespace

void print_profile() {
  if (!profiling()) return;
  std::lock_guard<std::mutex> lock(profile_mutex);
  std::fprintf(stderr, "kestrel vulkan profile (seconds, launches, shader):\n");
  for (const auto& [name, time] : profile)
    std::fprintf(stderr, "  %10.3f %8llu  %s\n", time.seconds, static_cast<unsigned long long>(time.launches), name.c_str());
  profile.clear();
}

void create_stream_objects(kestrel_stream* stream) {
  kestrel_context* context = stream->context;
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = context->physical->compute_queue_family;
  check(vkCreateCommandPool(context->device, &pool_info, nullptr, &stream->command_pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo allocate{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  allocate.commandPool = stream->command_pool;
  allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(context->device, &allocate, &stream->commands), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vkCreateFence(context->device, &fence_info, nullptr, &stream->fence), "vkCreateFence");
  VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, kDispatchesPerSubmit},
                                   {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDispatchesPerSubmit * kMaxBindings}};
  VkDescriptorPoolCreateInfo descriptor_info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  descriptor_info.maxSets = kDispatchesPerSubmit;
  descriptor_info.poolSizeCount = 2;
  descriptor_info.pPoolSizes = sizes;
  check(vkCreateDescriptorPool(context->device, &descriptor_info, nullptr, &stream->descriptor_pool),
        "vkCreateDescriptorPool");
  stream->params = allocate_host_buffer(context, uint64_t(params_stride(context)) * kDispatchesPerSubmit);
}

void destroy_stream_objects(kestrel_stream* stream) {
  VkDevice device = stream->context->device;
  destroy_buffer(stream->params);
  destroy_buffer(stream->staging);
  destroy_buffer(stream->flags);
  if (stream->descriptor_pool) vkDestroyDescriptorPool(device, stream->descriptor_pool, nullptr);
  if (stream->fence) vkDestroyFence(device, stream->fence, nullptr);
  if (stream->command_pool) vkDestroyCommandPool(device, stream->command_pool, nullptr);
}

void begin_commands(kestrel_stream* stream) {
  // Reset here too: a submission abandoned by an exception must not leak descriptor sets.
  check(vkResetDescriptorPool(stream->context->device, stream->descriptor_pool, 0), "vkResetDescriptorPool");
  check(vkResetCommandBuffer(stream->commands, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(stream->commands, &begin), "vkBeginCommandBuffer");
}

void end_submit_wait(kestrel_stream* stream) {
  // A fence only covers device-side accesses: make the writes visible to host reads (mapped memory).
  VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(stream->commands, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host,
                       0, nullptr, 0, nullptr);
  check(vkEndCommandBuffer(stream->commands), "vkEndCommandBuffer");
  kestrel_context* context = stream->context;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &stream->commands;
  {
    std::lock_guard<std::mutex> lock(context->queue_mutex);
    check(vkQueueSubmit(context->queue, 1, &submit, stream->fence), "vkQueueSubmit");
  }
  check(vkWaitForFences(context->device, 1, &stream->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(context->device, 1, &stream->fence), "vkResetFences");
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
  kestrel_context* context = stream->context;
  const uint32_t stride = params_stride(context);
  const auto started = std::chrono::steady_clock::now();
  for (size_t first = 0; first < dispatches.size(); first += kDispatchesPerSubmit) {
    const size_t last = std::min(dispatches.size(), first + kDispatchesPerSubmit);
    begin_commands(stream);
    for (size_t i = first; i < last; ++i) {
      const Dispatch& d = dispatches[i];
      const uint64_t params_offset = uint64_t(i - first) * stride;
      std::memcpy(static_cast<char*>(stream->params->mapped) + params_offset, &d.params, sizeof(Params));

      VkDescriptorSetAllocateInfo allocate{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
      allocate.descriptorPool = stream->descriptor_pool;
      allocate.descriptorSetCount = 1;
      allocate.pSetLayouts = &context->set_layout;
      VkDescriptorSet set = VK_NULL_HANDLE;
      check(vkAllocateDescriptorSets(context->device, &allocate, &set), "vkAllocateDescriptorSets");
      VkDescriptorBufferInfo infos[kMaxBindings + 1]{};
      infos[0] = {stream->params->buffer, params_offset, sizeof(Params)};
      for (int b = 0; b < kMaxBindings; ++b) {
        const kestrel_buffer* buffer = d.buffers[b] ? d.buffers[b] : context->unused_binding;
        infos[b + 1] = {buffer->buffer, 0, std::min<uint64_t>(buffer->reserved, context->max_binding_range)};
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

      if (i > first) compute_barrier(stream->commands);
      vkCmdBindPipeline(stream->commands, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline(context, d.shader));
      vkCmdBindDescriptorSets(stream->commands, VK_PIPELINE_BIND_POINT_COMPUTE, context->pipeline_layout, 0, 1, &set, 0,
                              nullptr);
      vkCmdDispatch(stream->commands, d.groups[0], d.groups[1], d.groups[2]);
    }
    end_submit_wait(stream);
  }
  if (profiling() && !dispatches.empty()) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::lock_guard<std::mutex> lock(profile_mutex);
    ShaderTime& entry = profile[dispatches.front().shader];
    entry.seconds += seconds;
    entry.launches += 1;
  }
}

}  // namespace kestrel_vk
