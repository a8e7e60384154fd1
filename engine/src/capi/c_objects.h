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
  std::unique_ptr<kestrel::Trainer> value;
  std::string device;  // kes_trainer_device's text
};

namespace kestrel::capi {
// "auto" or a device spec ("cpu", "cuda:1").
Device device_named(const char* name);
void copy_text(char* out, size_t size, const std::string& text);
}  // namespace kestrel::capi
