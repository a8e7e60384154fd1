// Inference with a trained model: the loss and accuracy over a dataset, and top-k predictions.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kestrel/functional.h"
#include "kestrel/loader.h"
#include "kestrel/ops.h"
#include "kestrel/trainer.h"
#include "data_parallel.h"
#include "scoring.h"

namespace kestrel {

EvalResult Trainer::evaluate() {
  refuse_without_samples("evaluate");
  return evaluate_on(test_);
}

// With data parallelism each rank evaluates its share of every batch and the sums are added over the
// ranks: every rank must call it (fit does).
EvalResult Trainer::evaluate_on(const std::shared_ptr<const data::Dataset>& dataset) {
  NoGradGuard no_grad;
  fn::AutocastScope autocast(config_.precision);  // evaluated as trained
  const int rank = group_ ? group_->rank() : 0, ranks = group_ ? group_->size() : 1;
  // Every rank scores its share with rank 0's running statistics (batch norm's), the ones its
  // checkpoint saves: each rank's last training step moved its own.
  if (group_) broadcast_buffers(*group_, *model_, "sharing rank 0's buffers before evaluating");
  data::DataLoader loader(dataset, {config_.eval_batch_size, false, false, 0, 1, 2, rank, ranks}, device_);
  loader.start_epoch(0);
  const bool classify = dataset->is_classification();
  Tensor loss_sum = Tensor::zeros({}, DType::f32, device_), correct = Tensor::zeros({}, DType::i64, device_);
  uint64_t unused_offset = 0;
  data::Batch batch;
  while (loader.next(batch)) {
    if (batch.size == 0) continue;  // this rank's share of a short last batch
    Var out = model_->forward(batch.inputs, false, 0, unused_offset);
    Tensor loss = batch_loss(config_.loss, out, batch.targets).value();
    ops::binary_(KESTREL_BINARY_ADD, loss_sum, loss_sum, ops::unary(KESTREL_UNARY_AFFINE, loss, double(batch.size), 0.0));
    if (classify) ops::binary_(KESTREL_BINARY_ADD, correct, correct, correct_count(out.value(), batch.targets));
  }
  if (group_) {
    group_->all_reduce_sum(loss_sum, "the evaluation loss");
    group_->all_reduce_sum(correct, "the evaluation's correct predictions");
    group_->wait("summing the evaluation over the ranks");
  }
  EvalResult result;
  result.samples = dataset->size;
  result.loss = loss_sum.to_doubles()[0] / double(dataset->size);
  result.accuracy = classify ? correct.to_doubles()[0] / (double(dataset->size) * double(dataset->target_numel())) : NAN;
  return result;
}

std::vector<Prediction> Trainer::predict(int64_t count, int64_t top_k) {
  NoGradGuard no_grad;
  fn::AutocastScope autocast(config_.precision);
  if (!test_->label_shape.empty())
    throw InvalidArgument("predict shows the classes of whole samples; this data has a label per position (a language "
                          "model: use generate)");
  count = std::min(count, test_->size);
  auto subset = std::make_shared<const data::Dataset>(test_->subset(count));
  data::DataLoader loader(subset, {count, false, false, 0, 1, 2}, device_);
  loader.start_epoch(0);
  data::Batch batch;
  loader.next(batch);
  uint64_t unused_offset = 0;
  Var out = fn::softmax(model_->forward(batch.inputs, false, 0, unused_offset));
  std::vector<double> probabilities = out.value().to_doubles();
  const int64_t classes = out.value().size(1);
  std::vector<Prediction> predictions;
  for (int64_t i = 0; i < count; ++i) {
    Prediction p;
    p.label = subset->is_classification() ? subset->labels[i] : -1;
    std::vector<std::pair<int64_t, double>> row;
    for (int64_t c = 0; c < classes; ++c) row.push_back({c, probabilities[i * classes + c]});
    std::sort(row.begin(), row.end(), [](auto& a, auto& b) { return a.second > b.second; });
    row.resize(std::min<int64_t>(top_k, classes));
    p.top = row;
    predictions.push_back(p);
  }
  return predictions;
}

std::string Trainer::class_name(int64_t label) const { return test_->class_name(label); }

}  // namespace kestrel
