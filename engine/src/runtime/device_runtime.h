// One device of one plugin: its context, default stream, and typed error conversion. Engine-internal.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/device.h"
#include "kestrel/plugin.h"
#include "loaded_plugin.h"

namespace kestrel {

class DeviceRuntime {
 public:
  DeviceRuntime(std::shared_ptr<LoadedPlugin> plugin, int index);
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  const kestrel_plugin_api& api() const { return plugin_->api(); }
  const std::string& backend() const { return plugin_->name(); }
  int index() const { return index_; }
  const std::string& str() const { return label_; }
  kestrel_context* context() const { return context_; }
  kestrel_stream* stream() const { return stream_; }

  // Throws the typed error for a failed status, with the plugin's message and `what` as context.
  void check(kestrel_status status, const std::string& what) const;

  kestrel_buffer* allocate(uint64_t bytes);  // OutOfMemory says requested/allocated/reserved/free
  void release(kestrel_buffer* buffer);
  void* host_address(kestrel_buffer* buffer) const { return api().buffer_host_address(buffer); }  // or nullptr
  void* host_allocate(uint64_t bytes);        // pinned where the plugin offers it
  void host_release(void* ptr);
  MemoryStats memory_stats() const;
  DeviceInfo properties() const;
  // properties().gemm_row_alignment, read once (the products ask for it at every call).
  uint32_t gemm_row_alignment() const;
  void synchronize() const;
  void release_cached_memory();  // waits, then hands cached free memory back (Engine::empty_cache)
  // How often the host has waited for this device's stream: tests check that a step does not.
  int64_t synchronizations() const { return synchronizations_.load(); }

  bool supports(const kestrel_op& op) const;
  // The bytes of op's `saved` output in the plugin's layout (ABI 1.15), or nothing where it keeps none.
  std::optional<uint64_t> saved_bytes(const kestrel_op& op) const;
  void launch(const kestrel_op& op) const;

  // Waits for the stream and destroys it and the context, once: at exit, before the drivers' own exit
  // handlers run (see the constructor), or in the destructor. Buffers freed later are left to the
  // process's end.
  void release_for_exit();
  void shut_down_plugin_for_exit();  // after every runtime of the plugin was released

 private:
  std::shared_ptr<LoadedPlugin> plugin_;
  int index_;
  std::string label_;
  kestrel_context* context_ = nullptr;
  kestrel_stream* stream_ = nullptr;
  mutable std::atomic<int64_t> synchronizations_{0};
  mutable std::atomic<int64_t> gemm_row_alignment_{-1};  // -1: not read yet
  std::atomic<bool> released_{false};
};

// Converts a plugin's device properties to the public struct.
DeviceInfo to_device_info(int index, const kestrel_device_properties& props);

}  // namespace kestrel
