#include "device_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "kestrel/error.h"

namespace kestrel {

namespace {
std::string kind_name(kestrel_device_kind kind) {
  switch (kind) {
    case KESTREL_DEVICE_KIND_CPU: return "cpu";
    case KESTREL_DEVICE_KIND_DISCRETE_GPU: return "discrete-gpu";
    case KESTREL_DEVICE_KIND_INTEGRATED_GPU: return "integrated-gpu";
    case KESTREL_DEVICE_KIND_SOFTWARE: return "software";
  }
  return "unknown";
}

std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

// The runtimes alive now. Allocated once and never destroyed: exit handlers read it.
struct LiveRuntimes {
  std::mutex mutex;
  std::vector<DeviceRuntime*> runtimes;
};
LiveRuntimes& live_runtimes() {
  static LiveRuntimes* live = new LiveRuntimes;
  return *live;
}

void release_live_runtimes_at_exit() {
  LiveRuntimes& live = live_runtimes();
  std::lock_guard<std::mutex> lock(live.mutex);
  for (DeviceRuntime* runtime : live.runtimes) runtime->release_for_exit();
  // Then their plugins, whose shutdown also calls the driver (vkDestroyInstance).
  for (DeviceRuntime* runtime : live.runtimes) runtime->shut_down_plugin_for_exit();
}
}  // namespace

DeviceInfo to_device_info(int index, const kestrel_device_properties& props) {
  DeviceInfo info;
  info.index = index;
  info.name = std::string(props.name, strnlen(props.name, sizeof(props.name)));
  info.kind = kind_name(props.kind);
  info.memory_total = props.memory_total;
  info.memory_free = props.memory_free;
  info.arch = std::string(props.arch, strnlen(props.arch, sizeof(props.arch)));
  info.compute_units = props.compute_units;
  info.runtime = std::string(props.runtime, strnlen(props.runtime, sizeof(props.runtime)));
  for (DType dtype : all_dtypes)
    if (props.dtype_mask & (1u << static_cast<int>(dtype))) info.dtypes.push_back(dtype);
  info.gemm_row_alignment = props.gemm_row_alignment;  // 0 unless the plugin (1.7) wrote it
  return info;
}

DeviceRuntime::DeviceRuntime(std::shared_ptr<LoadedPlugin> plugin, int index)
    : plugin_(std::move(plugin)), index_(index), label_(fmt::format("{}:{}", plugin_->name(), index)) {
  check(api().context_create(index_, &context_), "creating a context");
  kestrel_status status = api().stream_create(context_, &stream_);
  if (status != KESTREL_STATUS_OK) {
    std::string message = plugin_->last_error();
    api().context_destroy(context_);
    throw BackendError(fmt::format("{}: creating a stream failed: {}", label_, message));
  }
  // Registered after the context, so it runs before whatever exit handler the driver registered while
  // creating it (exit handlers run last-registered first). A Device that outlives main (kept by a static
  // object: a benchmark's registration, an application's global) is then released while the driver
  // still works: NVIDIA's, torn down by its handler, unmaps a Vulkan device's memory, and synchronising
  // that device afterwards crashed.
  {
    LiveRuntimes& live = live_runtimes();
    std::lock_guard<std::mutex> lock(live.mutex);
    live.runtimes.push_back(this);
  }
  std::atexit(release_live_runtimes_at_exit);
}

DeviceRuntime::~DeviceRuntime() {
  {
    LiveRuntimes& live = live_runtimes();
    std::lock_guard<std::mutex> lock(live.mutex);
    live.runtimes.erase(std::find(live.runtimes.begin(), live.runtimes.end(), this));
  }
  release_for_exit();
}

void DeviceRuntime::shut_down_plugin_for_exit() { plugin_->shut_down(); }

void DeviceRuntime::release_for_exit() {
  if (released_.exchange(true)) return;
  api().stream_synchronize(stream_);
  api().stream_destroy(stream_);
  api().context_destroy(context_);
}

void DeviceRuntime::check(kestrel_status status, const std::string& what) const {
  if (status == KESTREL_STATUS_OK) return;
  std::string message = fmt::format("{}: {} failed: {}", label_, what, plugin_->last_error());
  switch (status) {
    case KESTREL_STATUS_INVALID_ARGUMENT: throw InvalidArgument(message);
    case KESTREL_STATUS_UNSUPPORTED: throw Unsupported(message);
    case KESTREL_STATUS_OUT_OF_MEMORY: throw OutOfMemory(message);
    case KESTREL_STATUS_UNAVAILABLE: throw BackendUnavailable(message);
    default: throw BackendError(message);
  }
}

kestrel_buffer* DeviceRuntime::allocate(uint64_t bytes) {
  kestrel_buffer* buffer = nullptr;
  kestrel_status status = api().buffer_alloc(context_, bytes, &buffer);
  if (status == KESTREL_STATUS_OUT_OF_MEMORY) {
    MemoryStats stats = memory_stats();
    DeviceInfo info = properties();
    throw OutOfMemory(fmt::format(
        "{}: out of memory allocating {} ({} free of {}; {} allocated, {} reserved by Kestrel). Try a smaller "
        "batch, gradient accumulation or mixed precision, or free cached memory with empty_cache().",
        label_, mib(bytes), mib(info.memory_free), mib(info.memory_total), mib(stats.allocated),
        mib(stats.reserved)));
  }
  check(status, fmt::format("allocating {}", mib(bytes)));
  return buffer;
}

void DeviceRuntime::release(kestrel_buffer* buffer) {
  if (!released_) api().buffer_free(buffer);  // after release_for_exit the context took its memory along
}

void* DeviceRuntime::host_allocate(uint64_t bytes) {
  void* ptr = nullptr;
  check(api().host_alloc(context_, bytes, &ptr), fmt::format("allocating {} of pinned host memory", mib(bytes)));
  return ptr;
}

void DeviceRuntime::host_release(void* ptr) {
  if (!released_) api().host_free(context_, ptr);
}

MemoryStats DeviceRuntime::memory_stats() const {
  kestrel_memory_stats raw{};
  set_abi_size(raw);
  check(api().memory_stats(context_, &raw), "reading memory statistics");
  return MemoryStats{raw.allocated, raw.reserved, raw.peak_allocated, raw.alloc_count};
}

DeviceInfo DeviceRuntime::properties() const {
  kestrel_device_properties props{};
  set_abi_size(props);
  check(api().device_properties(index_, &props), "reading device properties");
  return to_device_info(index_, props);
}

uint32_t DeviceRuntime::gemm_row_alignment() const {
  if (gemm_row_alignment_.load() < 0) gemm_row_alignment_ = properties().gemm_row_alignment;
  return uint32_t(gemm_row_alignment_.load());
}

void DeviceRuntime::synchronize() const {
  ++synchronizations_;
  check(api().stream_synchronize(stream_), "synchronising");
}

void DeviceRuntime::release_cached_memory() {
  synchronize();
  check(api().memory_trim(context_), "releasing cached memory");
}

bool DeviceRuntime::supports(const kestrel_op& op) const { return api().supports_op(context_, &op) != 0; }

std::optional<uint64_t> DeviceRuntime::saved_bytes(const kestrel_op& op) const {
  uint64_t bytes = 0;
  if (api().op_saved_bytes(context_, &op, &bytes) != KESTREL_STATUS_OK) return std::nullopt;
  return bytes;
}

void DeviceRuntime::launch(const kestrel_op& op) const { check(api().launch(stream_, &op), "launching an op"); }

}  // namespace kestrel
