// Devices, plugins and memory statistics as users see them (the torch.cuda-style queries).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/dtype.h"

namespace kestrel {

class DeviceRuntime;  // engine-internal: a plugin context with its default stream

// A device handle: which backend, which index. Cheap to copy; valid while its Engine lives.
class Device {
 public:
  Device() = default;
  const std::string& backend() const;
  int index() const;
  std::string str() const;  // "cpu:0", "cuda:1"
  bool valid() const { return runtime_ != nullptr; }
  bool operator==(const Device& other) const { return runtime_ == other.runtime_; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  DeviceRuntime& runtime() const;  // throws if the handle is empty

 private:
  friend class Engine;
  explicit Device(std::shared_ptr<DeviceRuntime> runtime) : runtime_(std::move(runtime)) {}
  std::shared_ptr<DeviceRuntime> runtime_;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string kind;  // "cpu", "discrete-gpu", "integrated-gpu", "software"
  uint64_t memory_total = 0;
  uint64_t memory_free = 0;
  std::string arch;     // compute capability or instruction set
  int compute_units = 0;
  std::string runtime;  // e.g. "Kokkos 3.4.1 Serial"
  std::vector<DType> dtypes;
  // GEMMs prefer row strides that are a multiple of this many bytes (0: no preference; plugin ABI 1.7).
  uint32_t gemm_row_alignment = 0;
};

struct PluginInfo {
  std::string name;     // backend name; for a library that did not load, its file name
  std::string path;
  std::string version;
  std::string abi;      // "1.0"
  bool loaded = false;
  std::string reason;   // why it was skipped (empty when loaded)
  int priority = 0;
  std::vector<DeviceInfo> devices;
};

struct MemoryStats {
  uint64_t allocated = 0;
  uint64_t reserved = 0;
  uint64_t peak_allocated = 0;
  uint64_t alloc_count = 0;
};

}  // namespace kestrel
