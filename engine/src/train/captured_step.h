// A training step captured once and replayed: the trainer's forward, loss, backward and metric
// accumulation run on static input tensors, so after one eager warm-up step the whole sequence of
// launches is recorded (kestrel/graph.h) and every later step with the same batch shape is one replay.
// Engine-internal.
#pragma once
#include <functional>
#include <string>

#include "kestrel/graph.h"
#include "kestrel/loader.h"
#include "kestrel/tensor.h"

namespace kestrel {

class CapturedStep {
 public:
  // The step's launches on (inputs, targets); it advances rng_offset by the counters its draws use.
  using Body = std::function<void(const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset)>;
  CapturedStep(const Device& device, Body body) : device_(device), body_(std::move(body)) {}

  // Runs the step for `batch` and returns true, or returns false when the caller must run it eagerly:
  // the first (warm-up) step, a batch of another shape (the last, partial one), or after capture
  // failed (disabled() then says why).
  bool run(const data::Batch& batch, uint64_t& rng_offset);
  const std::string& disabled() const { return disabled_; }
  bool captured() const { return graph_.valid(); }

 private:
  void refresh_inputs(const data::Batch& batch, uint64_t rng_offset);

  Device device_;
  Body body_;
  Tensor inputs_, targets_, counter_base_;
  CapturedGraph graph_;
  uint64_t draws_ = 0;   // counters one step's random draws use
  bool warmed_up_ = false;
  std::string disabled_;
};

}  // namespace kestrel
