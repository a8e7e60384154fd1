// Model files: any text given to the model reader is a checked model or a ModelError.
#include "fuzz_target.hpp"
#include "kestrel/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kestrel::fuzz::expect_clear_errors("model_file", [&] {
    kestrel::ModelSpec spec = kestrel::ModelSpec::parse(kestrel::fuzz::text_of(data, size), "fuzz.json");
    spec.summary();
  });
  return 0;
}
