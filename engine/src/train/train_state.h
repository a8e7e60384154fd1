// Where a run stands: what a checkpoint saves and --resume restores. Engine-internal.
#pragma once
#include <cstdint>

namespace kestrel {

// The metrics window open since the last report (see MetricsWindow), saved so that a resumed run
// reports the same figures as an uninterrupted one.
struct WindowTotals {
  double loss = 0, correct = 0;
  int64_t steps = 0, samples = 0;
};

struct TrainState {
  int64_t epoch = 0;        // the epoch in progress
  int64_t batch = 0;        // batches of it already done
  int64_t step = 0;         // optimizer steps done
  uint64_t rng_offset = 0;  // Philox blocks used by dropout so far
  WindowTotals window;      // as saved; during a run the MetricsWindow holds the live figures
};

}  // namespace kestrel
