#include "plugin_search.h"

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cstdlib>
#include <sys/stat.h>
#include <filesystem>
#include <set>
#include <sstream>

namespace kestrel {
namespace fs = std::filesystem;

namespace {

bool is_plugin_file_name(const std::string& name) {
  const std::string prefix = "libkestrel_", suffix = ".so";
  return name.size() > prefix.size() + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split_path_list(const char* list) {
  std::vector<std::string> parts;
  if (!list) return parts;
  std::stringstream stream(list);
  std::string part;
  while (std::getline(stream, part, ':'))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

}  // namespace

std::vector<PluginCandidate> plugin_candidates(const EngineOptions& options) {
  std::vector<std::pair<std::string, bool>> locations;  // (path, named explicitly)
  for (const auto& path : options.plugin_path) locations.emplace_back(path, true);
  if (options.use_environment)
    for (const auto& path : split_path_list(std::getenv("KESTREL_PLUGIN_PATH"))) locations.emplace_back(path, true);
  if (options.use_default_locations) {
    boost::dll::fs::error_code ignored;
    // This code lives in libkestrel: its folder's kestrel/plugins is the build and install layout.
    auto engine_library = boost::dll::this_line_location(ignored);
    if (!ignored) locations.emplace_back((engine_library.parent_path() / "kestrel" / "plugins").string(), false);
    auto program = boost::dll::program_location(ignored);
    if (!ignored)
      locations.emplace_back((program.parent_path().parent_path() / "lib" / "kestrel" / "plugins").string(), false);
    locations.emplace_back(KESTREL_INSTALL_PLUGIN_DIR, false);
  }

  std::vector<PluginCandidate> candidates;
  std::set<std::string> seen;
  // Files by device and inode: a hard link to a file listed already is the same library to dlopen, which
  // would hand back the loaded one, and its second instance's shutdown would tear down the first's.
  std::set<std::pair<dev_t, ino_t>> files;
  auto add = [&](const fs::path& path, bool named) {
    std::error_code error;
    fs::path canonical = fs::weakly_canonical(path, error);
    std::string key = error ? path.string() : canonical.string();
    struct stat file {};
    if (::stat(key.c_str(), &file) == 0 && !files.insert({file.st_dev, file.st_ino}).second) return;
    if (seen.insert(key).second) candidates.push_back({key, named});
  };
  for (const auto& [location, named] : locations) {
    std::error_code error;
    if (fs::is_directory(location, error)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(location, error))
        if (is_plugin_file_name(entry.path().filename().string())) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) add(file, named);
    } else if (named) {
      add(location, true);  // a file, or a missing path that will be reported as not found
    }
  }
  return candidates;
}

}  // namespace kestrel
