// Every loaded plugin's raw ABI table, for tests that call a plugin's entries directly: the engine has
// loaded the libraries, and dlopen hands back the same copy.
#pragma once
#include <dlfcn.h>

#include <vector>

#include "kestrel/engine.h"
#include "kestrel/plugin.h"

namespace kestrel_test {

// The tables of plugins that loaded and found at least one device.
inline std::vector<const kestrel_plugin_api*> loaded_plugin_tables() {
  std::vector<const kestrel_plugin_api*> tables;
  for (const kestrel::PluginInfo& plugin : kestrel::Engine::global().plugins()) {
    if (!plugin.loaded || plugin.devices.empty()) continue;
    void* library = dlopen(plugin.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto entry = library ? reinterpret_cast<kestrel_plugin_entry_fn>(dlsym(library, KESTREL_PLUGIN_ENTRY_SYMBOL)) : nullptr;
    if (entry) tables.push_back(entry());
  }
  return tables;
}

}  // namespace kestrel_test
