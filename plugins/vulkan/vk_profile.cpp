// KESTREL_VULKAN_PROFILE=1: device time per shader. Launches no longer complete before they return,
// so host clocks would time the recording, not the work: each dispatch is bracketed by two timestamp
// queries instead, read back when its batch's fence has signalled, and the totals are printed when the
// context is destroyed. Each batch's span, from its first dispatch's start to its last one's end, is
// summed beside them: what the span holds beyond the shaders' own time went to the barriers between
// dispatches and to idling. A captured graph's chunks are timed at each replay (submit_chunks then
// waits for it). Devices whose compute queue has no timestamps say so and print nothing.
#include <cstdio>

#include "kestrel/plugin_env.hpp"
#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

struct ShaderTime {
  double seconds = 0;
  uint64_t launches = 0;
};
std::mutex& profile_mutex = *new std::mutex;
std::map<std::string, ShaderTime>& profile = *new std::map<std::string, ShaderTime>;
ShaderTime& spans = *new ShaderTime;  // batches' first-start-to-last-end spans

}  // namespace

bool profiling() {
  static const bool enabled = kestrel::plugin_env::flag("KESTREL_VULKAN_PROFILE");
  return enabled;
}

void create_timestamps(kestrel_context* context, Submission& batch) {
  if (!profiling()) return;
  if (context->physical->timestamp_valid_bits == 0) {
    static bool told = false;
    if (!told) std::fprintf(stderr, "kestrel vulkan profile: this device's compute queue has no timestamps\n");
    told = true;
    return;
  }
  VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = 2 * kDispatchesPerSubmit;
  check(vkCreateQueryPool(context->device, &info, nullptr, &batch.timestamps), "vkCreateQueryPool");
}

void begin_timestamps(VkCommandBuffer commands, Submission& batch) {
  if (!batch.timestamps) return;
  vkCmdResetQueryPool(commands, batch.timestamps, 0, 2 * kDispatchesPerSubmit);
  batch.timed_shaders.clear();
}

void time_dispatch_start(VkCommandBuffer commands, Submission& batch, const std::string& shader) {
  if (!batch.timestamps) return;
  const auto query = static_cast<uint32_t>(2 * batch.timed_shaders.size());
  vkCmdWriteTimestamp(commands, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, batch.timestamps, query);
  batch.timed_shaders.push_back(shader);
}

void time_dispatch_end(VkCommandBuffer commands, Submission& batch) {
  if (!batch.timestamps) return;
  const auto query = static_cast<uint32_t>(2 * batch.timed_shaders.size() - 1);
  vkCmdWriteTimestamp(commands, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, batch.timestamps, query);
}

void collect_timestamps(kestrel_context* context, Submission& batch) {
  if (!batch.timestamps || batch.timed_shaders.empty()) return;
  const auto count = static_cast<uint32_t>(2 * batch.timed_shaders.size());
  std::vector<uint64_t> ticks(count);
  check(vkGetQueryPoolResults(context->device, batch.timestamps, 0, count, count * sizeof(uint64_t), ticks.data(),
                              sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  const uint32_t bits = context->physical->timestamp_valid_bits;
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  const double seconds_per_tick = context->physical->properties.limits.timestampPeriod * 1e-9;
  std::lock_guard<std::mutex> lock(profile_mutex);
  for (size_t i = 0; i < batch.timed_shaders.size(); ++i) {
    ShaderTime& entry = profile[batch.timed_shaders[i]];
    entry.seconds += double((ticks[2 * i + 1] - ticks[2 * i]) & mask) * seconds_per_tick;
    entry.launches += 1;
  }
  spans.seconds += double((ticks[count - 1] - ticks[0]) & mask) * seconds_per_tick;
  spans.launches += 1;
  // The shader list stays: a graph's chunk is timed again at its next replay (begin_timestamps clears
  // a stream batch's when it is recorded anew).
}

void print_profile() {
  if (!profiling()) return;
  std::lock_guard<std::mutex> lock(profile_mutex);
  if (profile.empty()) return;
  std::fprintf(stderr, "kestrel vulkan profile (device seconds from timestamps, launches, shader):\n");
  ShaderTime all;
  for (const auto& [name, time] : profile) {
    std::fprintf(stderr, "  %10.3f %8llu  %s\n", time.seconds, static_cast<unsigned long long>(time.launches), name.c_str());
    all.seconds += time.seconds;
    all.launches += time.launches;
  }
  std::fprintf(stderr, "  %10.3f %8llu  (all shaders)\n", all.seconds, static_cast<unsigned long long>(all.launches));
  std::fprintf(stderr, "  %10.3f %8llu  (batches, first dispatch's start to last one's end: the rest is barriers and idling)\n",
               spans.seconds, static_cast<unsigned long long>(spans.launches));
  profile.clear();
  spans = {};
}

}  // namespace kestrel_vk
