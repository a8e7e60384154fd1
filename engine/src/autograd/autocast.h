// The rule every product under an AutocastScope follows (linear, conv2d, matmul): an f32 product runs on
// its operands cast to the scope's dtype and its result is cast back to f32. Engine-internal.
#pragma once
#include "kestrel/functional.h"

namespace kestrel::fn {

bool autocasts(const Var& x);  // x is f32 and a scope of a lower dtype is active
Var lowered(const Var& v);     // v in the scope's dtype; an undefined Var (no bias) stays undefined

}  // namespace kestrel::fn
