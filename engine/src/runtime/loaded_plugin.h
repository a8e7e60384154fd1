// A plugin library that loaded, passed its checks and initialised. Engine-internal.
#pragma once
#include <atomic>
#include <boost/dll/shared_library.hpp>
#include <memory>
#include <string>

#include "kestrel/plugin.h"
#include "kestrel/plugin_struct_size.hpp"

namespace kestrel {

class LoadedPlugin;

// What loading one library gave: the plugin, or the reason it was skipped (with what was learnt of it).
struct LoadOutcome {
  std::shared_ptr<LoadedPlugin> plugin;
  std::string reason;
  std::string name, version, abi;  // known once the function table was read
};

class LoadedPlugin {
 public:
  ~LoadedPlugin();  // shuts the plugin down (unless already done); the library unloads after
  // The plugin's shutdown, once: from the destructor, or at exit before the drivers' own exit handlers
  // run (DeviceRuntime's), with the library left loaded.
  void shut_down();
  const kestrel_plugin_api& api() const { return api_; }
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  int priority() const { return priority_; }
  // Devices as counted (and bounded) when the plugin was loaded; never asked again.
  int32_t device_count() const { return device_count_; }
  std::string abi() const;
  // The plugin's message for the last failure on this thread, never NULL.
  std::string last_error() const;

  const std::string& version() const { return version_; }
  // Loads, checks and initialises the plugin at `path`; on failure, a one-line reason.
  static LoadOutcome load(const std::string& path);

 private:
  LoadedPlugin() = default;
  boost::dll::shared_library library_;
  kestrel_plugin_api api_{};  // host copy with every optional entry filled in
  std::string name_;
  std::string path_;
  std::string version_;
  int priority_ = 0;
  int32_t device_count_ = 0;
  std::atomic<bool> initialized_{false};  // shutdown is owed only after a successful initialize
};

// Copies the plugin's table (as much as it declares) and fills optional entries with the host's
// defaults, so the rest of the engine never tests for NULL. Defined in plugin_defaults.cpp.
kestrel_plugin_api complete_plugin_api(const kestrel_plugin_api& from_plugin);
// The names of required entries that the table leaves NULL, comma-separated; empty when complete.
std::string missing_required_entries(const kestrel_plugin_api& api);
// Whether the plugin filled the capture entries itself (true) or runs on the host's refusals.
bool offers_capture(const kestrel_plugin_api& api);
// Whether the plugin filled the collective entries itself (the whole 1.3 set).
bool offers_collectives(const kestrel_plugin_api& api);
// Whether the plugin sizes saved outputs of its own layout (op_saved_bytes, ABI 1.15).
bool offers_saved_bytes(const kestrel_plugin_api& api);

}  // namespace kestrel
