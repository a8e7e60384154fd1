// A parameter's gradient: a view of the model's flat gradient buffer, zeroed lazily. Engine-internal.
#pragma once
#include "kestrel/autograd.h"

namespace kestrel {

// After zero(lazy = true) the buffer still holds last step's gradient, marked stale: the next
// contribution overwrites it (a copy, or a GEMM with beta = 0) instead of adding to it, so a step needs
// no zeroing pass over memory (torch's set_to_none, without the reallocation). Later contributions add.
class ParameterGrad final : public GradBuffer {
 public:
  using GradBuffer::GradBuffer;
  // The flat buffer is zeroed by the model in one fill when not lazy; here only the mark changes.
  void zero(bool lazy) { stale_ = lazy; }
  // Zeroes a gradient that no contribution reached since zero(lazy = true).
  void settle();
  void add(const Tensor& grad) override;
  void add_product(const Tensor& a, const Tensor& b, Tensor* row_sums = nullptr) override;
  // Straight into the storage: a stale gradient is zeroed in place first (no temporary, no copy).
  void add_rows(const Tensor& index, const Tensor& src) override;
  Tensor overwritable() override { return stale_ ? storage_ : Tensor(); }
  void overwritten() override { stale_ = false; }

 private:
  bool stale_ = false;  // the storage holds an old gradient
};

}  // namespace kestrel
