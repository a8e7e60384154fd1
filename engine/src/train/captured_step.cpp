#include "captured_step.h"

#include <fmt/format.h>

#include "kestrel/error.h"
#include "kestrel/ops.h"
#include "../runtime/device_runtime.h"

namespace kestrel {

void CapturedStep::refresh_inputs(const data::Batch& batch, uint64_t rng_offset) {
  ops::copy_(inputs_, batch.inputs);
  ops::copy_(targets_, batch.targets);
  // A fill is a launch with its value by copy, so it stays ordered with the replay on asynchronous
  // backends without a host buffer to keep alive; doubles hold counters exactly below 2^53.
  if (rng_offset >= (uint64_t(1) << 53)) throw InvalidArgument("captured step: random counter past 2^53");
  ops::fill_(counter_base_, double(rng_offset));
}

bool CapturedStep::run(const data::Batch& batch, uint64_t& rng_offset) {
  if (!disabled_.empty()) return false;
  if (graph_.valid()) {
    if (batch.inputs.shape() != inputs_.shape() || batch.targets.shape() != targets_.shape() ||
        batch.inputs.dtype() != inputs_.dtype() || batch.targets.dtype() != targets_.dtype())
      return false;
    refresh_inputs(batch, rng_offset);
    graph_.replay();
    rng_offset += draws_;
    return true;
  }
  if (!warmed_up_) {  // lazily created state (optimizer moments, library handles) settles in an eager step
    warmed_up_ = true;
    return false;
  }
  inputs_ = Tensor::empty(batch.inputs.shape(), batch.inputs.dtype(), device_);
  targets_ = Tensor::empty(batch.targets.shape(), batch.targets.dtype(), device_);
  counter_base_ = Tensor::zeros({}, DType::i64, device_);
  try {
    graph_ = CapturedGraph::capture(device_, [&] {
      ops::CounterBaseScope scope(counter_base_, rng_offset);
      uint64_t offset = rng_offset;
      body_(inputs_, targets_, offset);
      draws_ = offset - rng_offset;
    });
  } catch (const Error& e) {
    disabled_ = e.what();
    inputs_ = targets_ = counter_base_ = Tensor();
    return false;  // nothing ran: the caller repeats this step eagerly
  }
  // From now on the step's memory is the graph's own (CUDA's graph pool): what the eager warm-up step
  // left cached in the device's pool goes back, or a large step would need its peak twice over.
  device_.runtime().release_cached_memory();
  refresh_inputs(batch, rng_offset);
  graph_.replay();
  rng_offset += draws_;
  return true;
}

}  // namespace kestrel
