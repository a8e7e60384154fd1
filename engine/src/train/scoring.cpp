#include "scoring.h"

#include "kestrel/functional.h"
#include "kestrel/ops.h"

namespace kestrel {

Var batch_loss(LossKind kind, const Var& output, const Tensor& targets) {
  return kind == LossKind::mse ? fn::mse_loss(output, targets) : fn::cross_entropy(output, targets);
}

Tensor correct_count(const Tensor& logits, const Tensor& labels) {
  Tensor predicted = ops::reduce(KESTREL_REDUCE_ARGMAX, logits, {logits.rank() - 1});
  return ops::reduce(KESTREL_REDUCE_SUM, ops::binary(KESTREL_BINARY_EQ, predicted, labels));
}

}  // namespace kestrel
