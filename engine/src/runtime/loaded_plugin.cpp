// Loading one plugin library: every way it can fail becomes a one-line reason, never a crash.
#include "loaded_plugin.h"

#include <dlfcn.h>

#include <boost/dll/shared_library.hpp>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <fmt/format.h>

namespace kestrel {

namespace {
constexpr int32_t kMaxDevicesPerPlugin = 1024;

// One of the plugin's entries while it is being loaded. An exception thrown across the C ABI is a
// plugin's bug; it becomes this plugin's refusal, with its message, rather than the end of the engine.
template <class Entry>
kestrel_status call_entry(Entry&& entry, std::string& thrown) {
  try {
    return entry();
  } catch (const std::exception& e) {
    thrown = e.what();
  } catch (...) {
    thrown = "an exception of unknown type";
  }
  return KESTREL_STATUS_INTERNAL;
}
}  // namespace

LoadedPlugin::~LoadedPlugin() { shut_down(); }

void LoadedPlugin::shut_down() {
  if (initialized_.exchange(false)) api_.shutdown();
}

std::string LoadedPlugin::abi() const { return fmt::format("{}.{}", api_.abi_major, api_.abi_minor); }

std::string LoadedPlugin::last_error() const {
  const char* message = api_.last_error();
  return message && *message ? message : "(the plugin gave no message)";
}

LoadOutcome LoadedPlugin::load(const std::string& path) {
  namespace fs = std::filesystem;
  LoadOutcome outcome;
  auto skip = [&outcome](std::string reason) {
    outcome.reason = std::move(reason);
    return outcome;
  };
  std::error_code fs_error;
  if (!fs::exists(path, fs_error)) return skip("not found: " + path);
  // A FIFO or device named like a plugin would block or stream forever when the loader opens it.
  if (!fs::is_regular_file(path, fs_error)) return skip("not a regular file (a FIFO, device or folder): " + path);

  std::shared_ptr<LoadedPlugin> plugin(new LoadedPlugin());
  plugin->path_ = path;
  boost::dll::fs::error_code load_error;
  dlerror();  // clear, so the message read below is this load's
  plugin->library_.load(boost::dll::fs::path(path),
                        boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, load_error);
  if (load_error || !plugin->library_.is_loaded()) {
    const char* reason = dlerror();
    return skip(fmt::format("cannot load the library: {}", reason ? reason : load_error.message()));
  }
  if (!plugin->library_.has(KESTREL_PLUGIN_ENTRY_SYMBOL))
    return skip(fmt::format("no entry symbol '{}': not a Kestrel plugin, or built without KESTREL_PLUGIN_ENTRY",
                            KESTREL_PLUGIN_ENTRY_SYMBOL));

  const kestrel_plugin_api* table = nullptr;
  try {
    table = plugin->library_.get<const kestrel_plugin_api*()>(KESTREL_PLUGIN_ENTRY_SYMBOL)();
  } catch (const std::exception& e) {
    return skip(fmt::format("entry '{}' failed: {}", KESTREL_PLUGIN_ENTRY_SYMBOL, e.what()));
  }
  if (!table) return skip(fmt::format("entry '{}' returned no function table", KESTREL_PLUGIN_ENTRY_SYMBOL));
  if (table->struct_size < offsetof(kestrel_plugin_api, last_error))
    return skip(fmt::format("function table too small ({} bytes): corrupt or not a Kestrel plugin",
                            table->struct_size));
  outcome.abi = fmt::format("{}.{}", table->abi_major, table->abi_minor);
  if (table->name) outcome.name = table->name;
  if (table->version) outcome.version = table->version;
  if (table->abi_major != KESTREL_PLUGIN_ABI_MAJOR)
    return skip(fmt::format("built for plugin ABI {}, this engine speaks {}.{}: rebuild the plugin against this Kestrel",
                            outcome.abi, KESTREL_PLUGIN_ABI_MAJOR, KESTREL_PLUGIN_ABI_MINOR));
  // Before 1.2 plugins compared struct_size with sizeof and refuse the padded parameter blocks this host
  // sends (plugin.h's changelog).
  if (table->abi_minor < 2)
    return skip(fmt::format("built for plugin ABI {}, which measured struct sizes differently; this engine speaks "
                            "{}.{}: rebuild the plugin against this Kestrel",
                            outcome.abi, KESTREL_PLUGIN_ABI_MAJOR, KESTREL_PLUGIN_ABI_MINOR));
  if (!table->name || !*table->name) return skip("the function table has no backend name");
  plugin->name_ = table->name;
  plugin->version_ = table->version ? table->version : "";
  // Only the first struct_size bytes of the table are the plugin's: entries past them count as missing.
  plugin->api_ = complete_plugin_api(*table);
  const kestrel_plugin_api& api = plugin->api_;
  std::string missing = missing_required_entries(api);
  if (!missing.empty()) return skip(fmt::format("plugin '{}' lacks required entries: {}", plugin->name_, missing));

  std::string thrown;  // what an entry threw, where one did
  auto failure = [&] {
    return thrown.empty() ? plugin->last_error() : "it threw " + thrown + " (a plugin must return a status)";
  };
  kestrel_probe_result probe{};
  set_abi_size(probe);
  if (call_entry([&] { return api.probe(&probe); }, thrown) != KESTREL_STATUS_OK) return skip("probe failed: " + failure());
  probe.reason[sizeof(probe.reason) - 1] = '\0';
  if (!probe.usable) return skip(probe.reason[0] ? probe.reason : "the plugin's probe says it cannot run here");
  plugin->priority_ = probe.priority;

  if (call_entry([&] { return api.initialize(); }, thrown) != KESTREL_STATUS_OK)
    return skip("initialisation failed: " + failure());
  plugin->initialized_ = true;
  int32_t count = 0;
  if (call_entry([&] { return api.device_count(&count); }, thrown) != KESTREL_STATUS_OK)
    return skip("cannot count devices: " + failure());
  if (count <= 0) return skip("the plugin found no devices");
  // Every device is described when the engine starts: a count no machine has would stall every command.
  if (count > kMaxDevicesPerPlugin)
    return skip(fmt::format("the plugin reports {} devices, more than the {} the engine accepts: a broken plugin", count,
                            kMaxDevicesPerPlugin));
  plugin->device_count_ = count;
  outcome.plugin = plugin;
  return outcome;
}

}  // namespace kestrel
