// ZeRO stage 1 for data-parallel training: the optimizer state sharded over the ranks. Engine-internal.
#pragma once
#include <string>

#include "kestrel/distributed.h"
#include "kestrel/model.h"

namespace kestrel {

// Rank r of N owns parameters [r n, (r + 1) n) of the model's flat buffer (n = ceil(P / N); the last
// rank's part may be shorter or empty). The optimizer is built over that part alone, so each rank keeps
// 1/N of its state (Adam's two moments: 2P/N floats instead of 2P) and updates 1/N of the parameters;
// after each update the ranks all-gather the parts. The gradients are summed over the ranks as usual, so
// every update is the unsharded one, element for element.
class OptimizerShards {
 public:
  OptimizerShards(Model& model, ProcessGroup& group);

  // This rank's part of the flat parameters and gradients: views, for building the optimizer.
  Tensor parameters() const;  // (end - begin)
  Tensor gradients() const;   // (end - begin)
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }

  // After this rank's update: every rank's part into every rank's parameters. step names the step in a
  // failure's message.
  void gather_parameters(int64_t step);
  // part: a (end - begin) tensor of this rank (an optimizer state tensor) -> the whole (P) over all ranks,
  // for a checkpoint. Every rank must call it (a collective).
  Tensor gather(const Tensor& part, const std::string& label);

 private:
  Model& model_;
  ProcessGroup& group_;
  int64_t total_, shard_, begin_, end_;
  Tensor send_, received_;  // (shard) and (ranks * shard): the parts padded to one size, as all-gather needs
};

}  // namespace kestrel
