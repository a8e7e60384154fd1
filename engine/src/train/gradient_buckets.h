// Data-parallel gradient reduction: the model's flat gradient buffer cut into buckets, each summed over
// the ranks as soon as backward has finished with it. Engine-internal.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "kestrel/autograd.h"
#include "kestrel/distributed.h"
#include "kestrel/model.h"
#include "stopwatch.h"

namespace kestrel {

// The buckets are views of the model's flat gradient buffer (no copy, no extra memory), in backward's
// order: the last parameters first, since backward reaches them first. Each holds whole parameters up to
// about `cap_bytes` (DDP's bucket_cap_mb). During the observed backward pass a bucket is summed once
// every parameter in it is complete and every bucket before it has gone out, so all ranks issue the same
// collectives in the same order while backward keeps computing. The loss is weighted on each rank by
// its share of the global batch, so the sum is the global batch's mean gradient.
class GradientBuckets final : public LeafGradientObserver {
 public:
  GradientBuckets(Model& model, ProcessGroup& group, double cap_bytes);

  // Watch the next backward pass (the last micro-batch's) of step `step` (named in a failure's message):
  // call before it, within `scope`.
  void arm(int64_t step);
  // After that pass and Model::settle_gradients: sends the buckets not yet sent and waits for all.
  // `step` names the step in a failure's message.
  void finish(int64_t step);
  int count() const { return static_cast<int>(buckets_.size()); }
  // Seconds finish() has waited for sums in flight: the communication backward did not hide; and the
  // seconds from each step's first bucket sent to its last sum done. 1 - waited / span is the share of
  // the gradient communication that ran while this rank was still computing.
  double waited_seconds() const { return waited_seconds_; }
  double span_seconds() const { return span_seconds_; }

  void completed(const VarNode& leaf) override;

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // element range of the flat gradient buffer
    std::vector<size_t> parameters;
    size_t waiting = 0;          // parameters not complete yet in this pass
  };
  void send_ready();  // sends buckets in order while the next one is complete

  Model& model_;
  ProcessGroup& group_;
  std::vector<Bucket> buckets_;                            // in sending order
  std::unordered_map<const VarNode*, size_t> bucket_of_;   // a parameter's leaf -> its bucket
  std::unordered_map<const VarNode*, size_t> parameter_of_;
  size_t next_ = 0;                                        // the first bucket not sent in this pass
  bool armed_ = false;
  int64_t step_ = 0;  // the step whose gradients go out, for messages
  double waited_seconds_ = 0, span_seconds_ = 0;
  Stopwatch first_sent_;  // restarted when a step's first bucket goes
};

}  // namespace kestrel
