// The C API's opaque objects: thin holders of the C++ ones. Engine-internal.
#pragma once
#include <memory>
#include <string>

#include "kestrel/config.h"
#include "kestrel/tensor.h"
#include "kestrel/trainer.h"

struct kes_tensor {
  kestrel::Tensor value;
};
struct kes_config {
  kestrel::RunConfig value;
};
struct kes_trainer {
  std::unique_ptr<kestrel::Trainer> value;             // one device...
  std::unique_ptr<kestrel::MultiDeviceTrainer> ranks;  // ... or several of this process (the config's "devices")
  std::string device;  // kes_trainer_device's text
  // The trainer that speaks for the run: the only one, or rank 0.
  kestrel::Trainer& first() { return ranks ? ranks->rank(0) : *value; }
};

namespace kestrel::capi {
// "auto" or a device spec ("cpu", "cuda:1").
Device device_named(const char* name);
void copy_text(char* out, size_t size, const std::string& text);
}  // namespace kestrel::capi
