// A device buffer owned by the tensors that view it. Engine-internal.
#pragma once
#include <cstdint>

#include "../runtime/device_runtime.h"
#include "kestrel/device.h"

namespace kestrel {

class Storage {
 public:
  Storage(const Device& device, uint64_t bytes)
      : device_(device), bytes_(bytes), buffer_(device.runtime().allocate(bytes)) {}
  ~Storage() { device_.runtime().release(buffer_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  const Device& device() const { return device_; }
  kestrel_buffer* buffer() const { return buffer_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Device device_;  // keeps the context (and its plugin) alive while the buffer exists
  uint64_t bytes_;
  kestrel_buffer* buffer_;
};

}  // namespace kestrel
