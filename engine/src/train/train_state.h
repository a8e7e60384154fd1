// Where a run stands: what a checkpoint saves and --resume restores. Engine-internal.
#pragma once
#include <cstdint>
#include <vector>

namespace kestrel {

// The metrics window open since the last report (see MetricsWindow), saved so that a resumed run
// reports the same figures as an uninterrupted one.
struct WindowTotals {
  double loss = 0, correct = 0;
  int64_t steps = 0, samples = 0;
};

// f16's loss scale (GradScaler's state), saved so a resumed run scales as the uninterrupted one did.
struct LossScaleState {
  double scale = 0;           // 0: no loss scaling (f32, bf16)
  int64_t clean_steps = 0;    // steps in a row without overflow since the scale last changed
  int64_t skipped_steps = 0;  // steps skipped over the run for gradients that overflowed
};

struct TrainState {
  int64_t epoch = 0;        // the epoch in progress
  int64_t batch = 0;        // batches of it already done
  int64_t step = 0;         // optimizer steps done
  uint64_t rng_offset = 0;  // Philox blocks used by dropout so far (in a checkpoint: the ranks' largest)
  // Each data-parallel rank's own, in rank order (empty for one process): ranks' counters part where a
  // short last batch gives them unequal shares, and a rank resumed from another's would draw again the
  // masks it drew before.
  std::vector<uint64_t> rank_rng_offsets;
  WindowTotals window;      // as saved; during a run the MetricsWindow holds the live figures
  LossScaleState loss_scale;
};

}  // namespace kestrel
