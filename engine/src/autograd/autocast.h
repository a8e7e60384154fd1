// Mixed precision's rule, as torch.autocast has it (engine-internal). Under an AutocastScope of a 16-bit
// dtype:
// - products (linear, conv2d, matmul, attention) run in that dtype on operands cast to it, and their
//   results stay in it, so the activations between products are 16-bit;
// - ops that need f32's range or precision (softmax, norms, losses, reductions, pooling, recurrent
//   layers) widen a 16-bit input to f32 first (`widened`), and return f32;
// - element-wise activations and dropout run in the dtype they get, and add/sub/mul/concat of
//   different dtypes promote to the wider.
#pragma once
#include "kestrel/functional.h"

namespace kestrel::fn {

bool autocasts(const Var& x);  // a scope of a lower dtype is active and x is f32 or already in it
Var lowered(const Var& v);     // v in the scope's dtype; an undefined Var (no bias) stays undefined
Var widened(const Var& v);     // v in f32 when it is in the active scope's 16-bit dtype, else v itself
// The dtype two floating operands meet in, as torch's type promotion has it: the wider, and f32 for bf16
// with f16; `a` where either is not floating or they agree.
DType promoted_dtype(DType a, DType b);

}  // namespace kestrel::fn
