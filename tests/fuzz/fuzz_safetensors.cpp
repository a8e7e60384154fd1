// Safetensors files (checkpoint weights): any bytes decode to tensors whose data fits their shapes, or
// are refused.
#include "fuzz_target.hpp"
#include "kestrel/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kestrel::fuzz::expect_clear_errors("safetensors", [&] {
    kestrel::io::SafetensorsFile file =
        kestrel::io::decode_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    for (const auto& tensor : file.tensors)
      if (tensor.data.size() != size_t(kestrel::shape_numel(tensor.shape)) * kestrel::dtype_size(tensor.dtype)) std::abort();
  });
  return 0;
}
