#include "parameter_grad.h"

#include "kestrel/ops.h"

namespace kestrel {

void ParameterGrad::settle() {
  if (stale_) ops::fill_(storage_, 0.0);
  stale_ = false;
}

void ParameterGrad::add(const Tensor& grad) {
  if (stale_)
    ops::copy_(storage_, grad);  // casting a gradient of another dtype on the way
  else
    ops::binary_(KESTREL_BINARY_ADD, storage_, storage_, grad.dtype() == storage_.dtype() ? grad : grad.to(storage_.dtype()));
  stale_ = false;
}

void ParameterGrad::add_product(const Tensor& a, const Tensor& b, Tensor* row_sums) {
  Tensor grad = storage_.view({a.size(0), b.size(1)});
  if (row_sums)
    ops::gemm_with_row_sums_(grad, *row_sums, a, b, 1.0, stale_ ? 0.0 : 1.0);
  else
    ops::gemm_(grad, a, b, 1.0, stale_ ? 0.0 : 1.0);
  stale_ = false;
}

void ParameterGrad::add_rows(const Tensor& index, const Tensor& src) {
  settle();
  Tensor grad = storage_;
  ops::scatter_add_(grad, 0, index, src);
}

}  // namespace kestrel
