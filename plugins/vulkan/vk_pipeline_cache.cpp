// The on-disk VkPipelineCache: compiling the ~70 shader variants costs seconds on some drivers (and
// lavapipe compiles each through LLVM), at every run. The cache is loaded when a context is created
// and saved when it is destroyed, in $XDG_CACHE_HOME/kestrel/ (default ~/.cache/kestrel/), one file per
// device and driver build: the name holds the vendor and device IDs and the driver's
// pipelineCacheUUID, which changes with the driver.
//
// The file is the driver's cache data behind a small header of our own with its length and checksum:
// drivers are not required to survive arbitrary bytes, so a truncated or corrupt file, or one whose
// embedded Vulkan header names another device, is ignored (and replaced at the next save). Saving
// writes a temporary file and renames it over the old one, so concurrent runs never see half a file.
// KESTREL_VULKAN_PIPELINE_CACHE=0 turns the cache off.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'S', 'T', 'R', 'L', 'P', 'C', '1'};

struct FileHeader {
  char magic[8];
  uint64_t data_bytes;
  uint64_t checksum;  // of the data
};

// FNV-1a: enough to tell a damaged file from a good one.
uint64_t checksum(const std::vector<char>& data) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : data) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return hash;
}

bool disabled() {
  const char* setting = std::getenv("KESTREL_VULKAN_PIPELINE_CACHE");
  return setting && std::strcmp(setting, "0") == 0;
}

// $XDG_CACHE_HOME/kestrel (only if absolute, as the XDG spec says), else $HOME/.cache/kestrel; empty
// when neither is set.
fs::path cache_directory() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return fs::path(xdg) / "kestrel";
  const char* home = std::getenv("HOME");
  if (home && home[0]) return fs::path(home) / ".cache" / "kestrel";
  return {};
}

std::string file_name(const VkPhysicalDeviceProperties& properties) {
  char name[128];
  int at = std::snprintf(name, sizeof(name), "vulkan-pipelines-%04x-%04x-", properties.vendorID, properties.deviceID);
  for (uint8_t byte : properties.pipelineCacheUUID) at += std::snprintf(name + at, sizeof(name) - at, "%02x", byte);
  std::snprintf(name + at, sizeof(name) - at, ".bin");
  return name;
}

// The driver's data from the file, or nothing when the file is missing, damaged or for another device.
std::vector<char> read_cache_file(const std::string& path, const VkPhysicalDeviceProperties& properties) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  FileHeader header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header)) ||
      std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 || header.data_bytes > (1ull << 30))
    return {};
  std::vector<char> data(header.data_bytes);
  if (!in.read(data.data(), static_cast<std::streamsize>(data.size())) || checksum(data) != header.checksum) return {};
  // The driver's own header (VkPipelineCacheHeaderVersionOne) must name this device and driver build.
  VkPipelineCacheHeaderVersionOne vulkan{};
  if (data.size() < sizeof(vulkan)) return {};
  std::memcpy(&vulkan, data.data(), sizeof(vulkan));
  if (vulkan.headerVersion != VK_PIPELINE_CACHE_HEADER_VERSION_ONE || vulkan.vendorID != properties.vendorID ||
      vulkan.deviceID != properties.deviceID ||
      std::memcmp(vulkan.pipelineCacheUUID, properties.pipelineCacheUUID, VK_UUID_SIZE) != 0)
    return {};
  return data;
}

void write_cache_file(const std::string& path, const std::vector<char>& data) {
  std::error_code error;
  fs::create_directories(fs::path(path).parent_path(), error);
  if (error) return;
  // A name no other process writing the same cache uses.
  const std::string temporary = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(std::random_device{}());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    FileHeader header{};
    std::memcpy(header.magic, kMagic, sizeof(kMagic));
    header.data_bytes = data.size();
    header.checksum = checksum(data);
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out.flush()) {
      out.close();
      fs::remove(temporary, error);
      return;
    }
  }
  fs::rename(temporary, path, error);
  if (error) fs::remove(temporary, error);
}

}  // namespace

void open_pipeline_cache(kestrel_context* context) {
  if (disabled()) return;
  const fs::path directory = cache_directory();
  if (directory.empty()) return;
  const VkPhysicalDeviceProperties& properties = context->physical->properties;
  context->pipeline_cache_file = (directory / file_name(properties)).string();
  std::vector<char> data = read_cache_file(context->pipeline_cache_file, properties);
  VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  info.initialDataSize = data.size();
  info.pInitialData = data.empty() ? nullptr : data.data();
  if (vkCreatePipelineCache(context->device, &info, nullptr, &context->pipeline_cache) != VK_SUCCESS) {
    // The driver refused the data after all: start empty.
    info.initialDataSize = 0;
    info.pInitialData = nullptr;
    data.clear();
    if (vkCreatePipelineCache(context->device, &info, nullptr, &context->pipeline_cache) != VK_SUCCESS)
      context->pipeline_cache = VK_NULL_HANDLE;  // compile without a cache
  }
  context->pipeline_cache_loaded = data.empty() ? 0 : checksum(data);
}

void close_pipeline_cache(kestrel_context* context) {
  if (!context->pipeline_cache) return;
  size_t size = 0;
  std::vector<char> data;
  if (vkGetPipelineCacheData(context->device, context->pipeline_cache, &size, nullptr) == VK_SUCCESS && size > 0) {
    data.resize(size);
    if (vkGetPipelineCacheData(context->device, context->pipeline_cache, &size, data.data()) != VK_SUCCESS) data.clear();
    data.resize(std::min(size, data.size()));
  }
  // Rewritten only when this run compiled something new.
  if (!data.empty() && checksum(data) != context->pipeline_cache_loaded)
    write_cache_file(context->pipeline_cache_file, data);
  vkDestroyPipelineCache(context->device, context->pipeline_cache, nullptr);
  context->pipeline_cache = VK_NULL_HANDLE;
}

}  // namespace kestrel_vk
