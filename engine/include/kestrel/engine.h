// The Engine: finds backend plugins, loads the ones that can run here, and hands out devices.
#pragma once
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/device.h"

namespace kestrel {

struct EngineOptions {
  // Folders or plugin files searched before the defaults. Empty: KESTREL_PLUGIN_PATH (colon-separated),
  // then lib/kestrel/plugins beside the engine library and the executable, then the install location.
  std::vector<std::string> plugin_path;
  bool use_environment = true;  // read KESTREL_PLUGIN_PATH
  bool use_default_locations = true;
};

class LoadedPlugin;

class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The process-wide engine most programs use; created on first call.
  static Engine& global();

  // Every plugin found, loaded or skipped with its reason, in search order.
  const std::vector<PluginInfo>& plugins() const { return plugins_; }
  std::vector<std::string> available_backends() const;  // loaded, by priority (best first)
  bool is_available(const std::string& backend) const;
  int device_count(const std::string& backend) const;

  // "cpu", "cuda:1", "vulkan:0". An unknown or skipped backend throws BackendUnavailable naming the
  // reason and the backends that are available.
  Device device(const std::string& spec);
  // The first available of `preferences` ("cuda", "vulkan:1", "cpu"); "auto", or no preferences at all,
  // means the loaded backend with the highest priority (a GPU before the CPU, the CPU before a software
  // GPU such as lavapipe).
  Device best_device(const std::vector<std::string>& preferences = {});

  DeviceInfo properties(const Device& device) const;
  MemoryStats memory_stats(const Device& device) const;
  void reset_peak_memory_stats(const Device& device);
  void empty_cache(const Device& device);
  void synchronize(const Device& device);
  // Times the host has waited for the device so far (reads, copies, synchronize): a training step that
  // reads nothing back adds none.
  int64_t synchronizations(const Device& device) const;

 private:
  void discover(const EngineOptions& options);
  std::vector<PluginInfo> plugins_;
  std::vector<std::shared_ptr<LoadedPlugin>> loaded_;
  std::map<std::string, std::shared_ptr<DeviceRuntime>> runtimes_;  // by "backend:index"
  std::mutex runtimes_mutex_;  // threads (a program's, MultiDeviceTrainer's ranks) open devices at once
};

}  // namespace kestrel
