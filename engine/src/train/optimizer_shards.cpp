#include "optimizer_shards.h"

#include <fmt/format.h>

#include <algorithm>

namespace kestrel {

OptimizerShards::OptimizerShards(Model& model, ProcessGroup& group)
    : model_(model), group_(group), total_(model.flat_parameters().numel()) {
  shard_ = (total_ + group.size() - 1) / group.size();
  begin_ = std::min(total_, shard_ * group.rank());
  end_ = std::min(total_, begin_ + shard_);
  send_ = Tensor::zeros({shard_}, DType::f32, model.device());
  received_ = Tensor::empty({shard_ * group.size()}, DType::f32, model.device());
}

Tensor OptimizerShards::parameters() const { return model_.flat_parameters().slice(0, begin_, end_); }
Tensor OptimizerShards::gradients() const { return model_.flat_gradients().slice(0, begin_, end_); }

Tensor OptimizerShards::gather(const Tensor& part, const std::string& label) {
  if (end_ > begin_) send_.slice(0, 0, end_ - begin_).copy_from(part);
  group_.all_gather(send_, received_, label);
  group_.wait("gathering " + label + " from every rank");
  return received_.slice(0, 0, total_);
}

void OptimizerShards::gather_parameters(int64_t step) {
  Tensor whole = gather(parameters(), fmt::format("the parameters each rank updated at step {}", step));
  model_.flat_parameters().copy_from(whole);
}

}  // namespace kestrel
