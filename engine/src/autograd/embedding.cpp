// Token embeddings: forward and backward side by side.
#include <fmt/format.h>

#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

// The composed path: a gather of whole rows and, backward, a scatter-add of the rows' gradients. Gather
// and scatter_add take an index of their data's rank (torch.gather semantics), so each token id is
// repeated across the row, as a stride-0 view: no (count, D) index is written or read.
Var embedding(const Tensor& tokens, const Var& weight, int64_t padding_idx) {
  const Tensor& table = weight.value();  // (V, D)
  if (tokens.dtype() != DType::i64 || table.rank() != 2)
    throw InvalidArgument(fmt::format("embedding: expected i64 token ids and a (vocabulary, width) table, got {} and {}",
                                      tokens.describe(), table.describe()));
  const int64_t count = tokens.numel(), width = table.size(1);
  Tensor rows = tokens.contiguous().view({count, 1}).expand({count, width});  // (count, D) row ids, strides (1, 0)
  Shape out_shape = tokens.shape();  // (N, ...) -> (N, ..., D)
  out_shape.push_back(width);
  Tensor y = ops::gather(table, 0, rows).view(out_shape);
  return make_var(y, {weight}, "embedding", [weight = weight.node(), rows, count, width, padding_idx](const Tensor& dy) {
    if (!weight->requires_grad) return;
    const Tensor rows_grad = dy.contiguous().view({count, width});  // (count, D)
    // Without a padding row the rows go straight into the weight's gradient buffer (no (V, D) temporary
    // and copy: 154 MB each for GPT-2's table). torch's padding row receives nothing from the embedding
    // but may from elsewhere (a tied output layer), so that case zeroes its row in a temporary.
    if (padding_idx < 0 && weight->grad_buffer && weight->grad_buffer->storage().dtype() == rows_grad.dtype())
      return weight->grad_buffer->add_rows(rows, rows_grad);
    Tensor grad = Tensor::zeros(weight->value.shape(), dy.dtype(), dy.device());  // (V, D)
    ops::scatter_add_(grad, 0, rows, rows_grad);
    if (padding_idx >= 0) {
      Tensor padding_row = grad.slice(0, padding_idx, padding_idx + 1);
      ops::fill_(padding_row, 0.0);
    }
    accumulate_grad(*weight, grad);
  });
}

namespace {

// The identity on a (V, D) table whose backward leaves the row `padding_idx` without gradient, as the
// embedding gives it none.
Var without_row_grad(const Var& table, int64_t padding_idx) {
  return make_var(table.value(), {table}, "padding_row", [table = table.node(), padding_idx](const Tensor& dt) {  // (V, D)
    Tensor grad = dt.clone();
    Tensor padding_row = grad.slice(0, padding_idx, padding_idx + 1);
    ops::fill_(padding_row, 0.0);
    accumulate_grad(*table, grad);
  });
}

}  // namespace

// Every token's row of table W^T + b is its embedding's projection, so the projection runs over V rows.
// Backward follows from the same composition: the embedding's scatter sums the tokens' gradients per
// row into a (V, G) gradient, and the products that give the weight's and table's gradients run over V
// rows. Only the table's path skips the padding row: the weight and bias still see the padding tokens,
// as they do in the unfolded projection.
Var projected_embedding(const EmbeddedTokens& embedded, const Var& weight, const Var& bias) {
  const Var table = embedded.padding_idx < 0 ? embedded.table : without_row_grad(embedded.table, embedded.padding_idx);
  return embedding(embedded.tokens, linear(table, weight, bias));  // (N, ..., G)
}

}  // namespace kestrel::fn
