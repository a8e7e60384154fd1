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

bool autocasts(const Var& x) {
  const DType dtype = x.value().dtype();
  return autocast != DType::f32 && (dtype == DType::f32 || dtype == autocast);
}
Var lowered(const Var& v) { return v.defined() ? cast(v, autocast) : v; }
Var widened(const Var& v) {
  return v.defined() && autocast != DType::f32 && v.value().dtype() == autocast ? cast(v, DType::f32) : v;
}

DType promoted_dtype(DType a, DType b) {
  if (a == b || !is_floating(a) || !is_floating(b)) return a;
  if (dtype_size(a) == dtype_size(b)) return DType::f32;
  return dtype_size(a) > dtype_size(b) ? a : b;
}

Var cast(const Var& x, DType dtype) {
  if (x.value().dtype() == dtype) return x;
  return make_var(x.value().to(dtype), {x}, "cast",
                  [x = x.node()](const Tensor& dy) { accumulate_grad(*x, dy); });  // cast where it lands
}

}  // namespace kestrel::fn
