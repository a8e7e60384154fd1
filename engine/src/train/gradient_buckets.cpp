#include "gradient_buckets.h"

#include <fmt/format.h>

namespace kestrel {

GradientBuckets::GradientBuckets(Model& model, ProcessGroup& group, double cap_bytes) : model_(model), group_(group) {
  auto& parameters = model_.parameters();
  Bucket bucket;
  double bytes = 0;
  for (size_t i = parameters.size(); i-- > 0;) {
    const Tensor& value = parameters[i].var.value();  // a view of the flat buffer; gradients share the layout
    if (bucket.parameters.empty()) bucket.end = value.offset() + value.numel();
    bucket.begin = value.offset();
    bucket.parameters.push_back(i);
    bytes += double(value.numel()) * 4;
    if (bytes >= cap_bytes) {
      buckets_.push_back(std::move(bucket));
      bucket = Bucket();
      bytes = 0;
    }
  }
  if (!bucket.parameters.empty()) buckets_.push_back(std::move(bucket));
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b].parameters) {
      bucket_of_[parameters[i].var.node().get()] = b;
      parameter_of_[parameters[i].var.node().get()] = i;
    }
}

void GradientBuckets::arm(int64_t step) {
  step_ = step;
  for (Bucket& bucket : buckets_) bucket.waiting = bucket.parameters.size();
  next_ = 0;
  armed_ = true;
}

void GradientBuckets::completed(const VarNode& leaf) {
  if (!armed_) return;
  auto found = bucket_of_.find(&leaf);
  if (found == bucket_of_.end()) return;  // not one of the model's parameters
  // A parameter backward reached but gave nothing (no path carried a gradient) is zero, not last step's.
  model_.settle_gradient(parameter_of_.at(&leaf));
  --buckets_[found->second].waiting;
  send_ready();
}

void GradientBuckets::send_ready() {
  const Tensor& flat = model_.flat_gradients();
  while (next_ < buckets_.size() && buckets_[next_].waiting == 0) {
    if (next_ == 0) first_sent_.restart();
    group_.all_reduce_sum(flat.slice(0, buckets_[next_].begin, buckets_[next_].end),
                          fmt::format("step {}: gradient bucket {} of {}", step_, next_ + 1, buckets_.size()));
    ++next_;
  }
}

void GradientBuckets::finish(int64_t step) {
  if (!armed_) next_ = 0;  // no pass this step (a rank without samples): every bucket is still to go
  armed_ = false;
  step_ = step;
  // Parameters this pass did not reach have settled to zero by now.
  for (size_t b = next_; b < buckets_.size(); ++b) buckets_[b].waiting = 0;
  send_ready();
  const Stopwatch waiting;
  group_.wait(fmt::format("step {}: summing the gradients over {} ranks", step, group_.size()));
  waited_seconds_ += waiting.seconds();
  span_seconds_ += first_sent_.seconds();
}

}  // namespace kestrel
