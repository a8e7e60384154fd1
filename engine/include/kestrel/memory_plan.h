// What a training run will hold on its device, before it runs: Trainer::plan_memory() and `kestrel plan`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

// Bytes, for one micro-batch where a figure depends on the batch.
struct LayerMemory {
  std::string label;        // "/layers/3 (linear)"
  int64_t parameters = 0;   // its weights (as many again for their gradients)
  int64_t activations = 0;  // what its forward keeps for backward, at the plan's micro-batch
};

// Parameters, gradients and the optimizer's state are counted; what a step keeps for backward and its
// largest temporary are measured by running the model's forward and backward on two small batches (16 and 32 samples) of
// the run's own data on the device, and extended linearly in the batch size (activations grow with
// the samples; weights, library workspaces and per-launch buffers do not). Evaluation's forward is
// measured the same way at the evaluation batch size; the peak is the larger of the two.
struct MemoryPlan {
  std::string device;
  // micro_batch: the samples one device's forward and backward take at once (a data-parallel rank's
  // share of the global micro-batch).
  int64_t batch_size = 0, micro_batch = 0, accumulate_steps = 1, eval_batch = 0;
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  int64_t other_held = 0;           // allocated before the plan beyond the above (metrics, constants)
  int64_t activations = 0;          // kept for backward by one micro-batch's forward
  int64_t step_temporary = 0;       // a training step's peak above the kept activations
  int64_t update_temporary = 0;     // the update's own, with the activations gone (clipping's squares)
  int64_t eval_peak = 0;            // evaluation's peak above what is held
  int64_t data_in_flight = 0;       // batches on the device: the one in use and the loader's prefetched
  int64_t per_sample = 0;           // the step's peak growth per sample of the micro-batch
  int64_t step_fixed = 0;           // the step's peak at zero samples (workspaces)
  int64_t predicted_peak = 0;       // everything above at once: what the memory statistics will show
  int64_t device_free = 0, device_total = 0;
  bool fits = false;
  int64_t largest_micro_batch = 0;  // the largest that fits (0: not even one sample)
  // The fewest micro-batches per step that fit with micro-batches dividing a device's share of
  // batch_size (0: none does).
  int64_t suggested_accumulate_steps = 0;
  std::vector<LayerMemory> layers;

  // The table `kestrel plan` prints: per layer, then the totals, the verdict and the suggestion.
  std::string report() const;
};

}  // namespace kestrel
