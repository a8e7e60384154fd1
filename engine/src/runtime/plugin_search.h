// Where the engine looks for plugins, in order. Engine-internal.
#pragma once
#include <string>
#include <vector>

#include "kestrel/engine.h"

namespace kestrel {

struct PluginCandidate {
  std::string path;      // a plugin file, or a path that was named but does not exist
  bool named_explicitly;  // came from the options or KESTREL_PLUGIN_PATH, not a default folder
};

// Folders and files to search: options.plugin_path, KESTREL_PLUGIN_PATH, the folder beside the engine
// library, beside the executable, then the install location. A folder contributes its libkestrel_*.so
// files, sorted; each file appears once (the first time it is reached).
std::vector<PluginCandidate> plugin_candidates(const EngineOptions& options);

// Sets OPENBLAS_CORETYPE from the CPU's instruction sets unless the user did (openblas_settings.cpp):
// call before loading plugins, since OpenBLAS reads it when it is loaded.
void choose_openblas_settings();

}  // namespace kestrel
