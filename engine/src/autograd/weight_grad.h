// Weight gradients shared by the layers' backward functions.
#pragma once
#include "kestrel/autograd.h"

namespace kestrel::fn {

// dW += a @ b, a: (M, K), b: (K, N), straight into the weight's gradient buffer when it has one (one
// GEMM instead of a product, a temporary and an addition); nothing if the weight needs no gradient.
void accumulate_product(VarNode& weight, const Tensor& a, const Tensor& b);

// db += dz summed over its rows, dz: (N, out), db: (out): reduced straight into the bias's gradient
// storage where grad_destination allows, else reduced and accumulated (a 16-bit sum cast as it lands).
void accumulate_row_sum(VarNode& bias, const Tensor& dz);

// Both of a linear layer's parameter gradients from dz: dW += a @ b and db += a's rows summed, a = dz^T
// (out, N), b (N, in). One GEMM writes both where the weight's gradient has storage (GradBuffer::
// add_product's row sums, in its dtype); else the two above.
void accumulate_product_and_row_sum(VarNode& weight, VarNode& bias, const Tensor& a, const Tensor& b);

}  // namespace kestrel::fn
