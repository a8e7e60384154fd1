// Run configs: any text given to the config reader is a checked config or a ConfigError.
#include "fuzz_target.hpp"
#include "kestrel/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kestrel::fuzz::expect_clear_errors("run_config", [&] {
    kestrel::RunConfig::parse(kestrel::fuzz::text_of(data, size), "/fuzz/run.train.json");
  });
  return 0;
}
