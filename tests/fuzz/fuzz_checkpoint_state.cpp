// checkpoint.json: any text is a checked checkpoint state or an InvalidArgument saying it is unusable;
// one that passes re-encodes to a state that decodes the same.
#include <cstdlib>

#include "../../engine/src/train/checkpoint_state.h"
#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kestrel::fuzz::expect_clear_errors("checkpoint_state", [&] {
    const std::string path = "/fuzz/run/checkpoint.json";
    const kestrel::CheckpointState state = kestrel::decode_checkpoint_state(kestrel::fuzz::text_of(data, size), path);
    const kestrel::CheckpointState again = kestrel::decode_checkpoint_state(kestrel::encode_checkpoint_state(state), path);
    if (again.train.step != state.train.step || again.train.rng_offset != state.train.rng_offset ||
        again.weights_sha256 != state.weights_sha256 || again.optimizer_steps != state.optimizer_steps)
      std::abort();
  });
  return 0;
}
