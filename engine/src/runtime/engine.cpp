#include "kestrel/engine.h"

#include <algorithm>
#include <charconv>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "device_runtime.h"
#include "kestrel/error.h"
#include "loaded_plugin.h"
#include "plugin_search.h"

namespace kestrel {

const std::string& Device::backend() const { return runtime().backend(); }
int Device::index() const { return runtime().index(); }
std::string Device::str() const { return runtime_ ? runtime_->str() : "(no device)"; }
DeviceRuntime& Device::runtime() const {
  if (!runtime_) throw InvalidArgument("empty Device handle: get one from Engine::device()");
  return *runtime_;
}

Engine::Engine(EngineOptions options) { discover(options); }

Engine::~Engine() {
  runtimes_.clear();  // contexts go before their plugins shut down
  loaded_.clear();
}

Engine& Engine::global() {
  static Engine engine;
  return engine;
}

void Engine::discover(const EngineOptions& options) {
  choose_openblas_settings();
  for (const PluginCandidate& candidate : plugin_candidates(options)) {
    LoadOutcome outcome = LoadedPlugin::load(candidate.path);
    PluginInfo info;
    info.path = candidate.path;
    info.name = outcome.name.empty() ? std::filesystem::path(candidate.path).filename().string() : outcome.name;
    info.version = outcome.version;
    info.abi = outcome.abi;
    if (outcome.plugin) {
      const auto& plugin = outcome.plugin;
      auto twin = std::find_if(loaded_.begin(), loaded_.end(), [&](auto& p) { return p->name() == plugin->name(); });
      if (twin != loaded_.end()) {
        info.reason = fmt::format("shadowed by the '{}' plugin loaded earlier from {}", plugin->name(), (*twin)->path());
      } else {
        info.loaded = true;
        info.priority = plugin->priority();
        for (int32_t index = 0; index < plugin->device_count(); ++index) {
          kestrel_device_properties props{};
          set_abi_size(props);
          if (plugin->api().device_properties(index, &props) == KESTREL_STATUS_OK)
            info.devices.push_back(to_device_info(index, props));
        }
        loaded_.push_back(plugin);
      }
    } else {
      info.reason = outcome.reason;
    }
    plugins_.push_back(std::move(info));
  }
}

std::vector<std::string> Engine::available_backends() const {
  std::vector<std::shared_ptr<LoadedPlugin>> sorted = loaded_;
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a->priority() > b->priority(); });
  std::vector<std::string> names;
  for (auto& plugin : sorted) names.push_back(plugin->name());
  return names;
}

bool Engine::is_available(const std::string& backend) const {
  return std::any_of(loaded_.begin(), loaded_.end(), [&](auto& p) { return p->name() == backend; });
}

int Engine::device_count(const std::string& backend) const {
  for (const auto& info : plugins_)
    if (info.loaded && info.name == backend) return static_cast<int>(info.devices.size());
  return 0;
}

Device Engine::device(const std::string& spec) {
  std::string backend = spec;
  int index = 0;
  if (auto colon = spec.find(':'); colon != std::string::npos) {
    backend = spec.substr(0, colon);
    const std::string digits = spec.substr(colon + 1);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || index < 0)
      throw InvalidArgument(fmt::format("device '{}': expected BACKEND or BACKEND:INDEX with INDEX a device number, "
                                        "e.g. cuda:0",
                                        spec));
  }
  std::string available = fmt::format("{}", fmt::join(available_backends(), ", "));
  if (available.empty()) available = "none (run `kestrel devices` to see why)";
  auto plugin = std::find_if(loaded_.begin(), loaded_.end(), [&](auto& p) { return p->name() == backend; });
  if (plugin == loaded_.end()) {
    for (const auto& info : plugins_)
      if (info.name == backend && !info.loaded)
        throw BackendUnavailable(fmt::format("backend '{}' is not available: {} (plugin {}). Available: {}", backend,
                                             info.reason, info.path, available));
    throw BackendUnavailable(fmt::format("no '{}' backend plugin was found. Available: {}. Set KESTREL_PLUGIN_PATH "
                                         "to the folder holding libkestrel_{}.so if it is elsewhere.",
                                         backend, available, backend));
  }
  int count = device_count(backend);
  if (index < 0 || index >= count)
    throw BackendUnavailable(fmt::format("device '{}' does not exist: backend '{}' has {} device(s), indices 0..{}",
                                         spec, backend, count, count - 1));
  std::string key = fmt::format("{}:{}", backend, index);
  std::lock_guard<std::mutex> lock(runtimes_mutex_);  // one runtime per device, however many threads ask
  auto& runtime = runtimes_[key];
  if (!runtime) runtime = std::make_shared<DeviceRuntime>(*plugin, index);
  return Device(runtime);
}

Device Engine::best_device(const std::vector<std::string>& preferences) {
  if (preferences.empty()) {
    auto backends = available_backends();
    if (backends.empty()) throw BackendUnavailable("no backend plugin could be loaded; run `kestrel devices` to see why");
    return device(backends.front());
  }
  std::vector<std::string> refusals;
  for (const auto& spec : preferences) {
    try {
      if (spec == "auto") return best_device();  // the loaded backend with the highest priority
      return device(spec);
    } catch (const BackendUnavailable& e) {
      refusals.push_back(e.what());
    }
  }
  throw BackendUnavailable(fmt::format("none of the preferred backends can run: {}", fmt::join(refusals, "; ")));
}

DeviceInfo Engine::properties(const Device& device) const { return device.runtime().properties(); }
MemoryStats Engine::memory_stats(const Device& device) const { return device.runtime().memory_stats(); }

void Engine::reset_peak_memory_stats(const Device& device) {
  DeviceRuntime& runtime = device.runtime();
  runtime.check(runtime.api().memory_reset_peak(runtime.context()), "resetting the peak memory statistic");
}

void Engine::empty_cache(const Device& device) { device.runtime().release_cached_memory(); }

void Engine::synchronize(const Device& device) { device.runtime().synchronize(); }

int64_t Engine::synchronizations(const Device& device) const { return device.runtime().synchronizations(); }

}  // namespace kestrel
