// Mixed precision's casts: the scope that selects the GEMMs' dtype and the differentiable cast.
#include <fmt/format.h>

#include "autocast.h"

namespace kestrel::fn {

namespace {
thread_local DType autocast = DType::f32;
}  // namespace

AutocastScope::AutocastScope(DType dtype) : previous_(autocast) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw InvalidArgument(fmt::format("autocast: products run in f32, bf16 or f16, not {}", dtype_name(dtype)));
  autocast = dtype;
}
AutocastScope::~AutocastScope() { autocast = previous_; }
DType autocast_dtype() { return autocast; }

bool autocasts(const Var& x) { return autocast != DType::f32 && x.value().dtype() == DType::f32; }
Var lowered(const Var& v) { return v.defined() ? cast(v, autocast) : v; }
Var into_autocast(const Var& v) { return v.defined() && autocasts(v) ? cast(v, autocast) : v; }

Var cast(const Var& x, DType dtype) {
  if (x.value().dtype() == dtype) return x;
  return make_var(x.value().to(dtype), {x}, "cast",
                  [x = x.node()](const Tensor& dy) { accumulate_grad(*x, dy.to(x->value.dtype())); });
}

}  // namespace kestrel::fn
