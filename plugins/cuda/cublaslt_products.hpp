// Products through cuBLASLt: LINEAR with the bias in the product's epilogue, and plain 2-D GEMMs
// (cublaslt_products.cpp).
#pragma once
#include "cuda_ops.hpp"

namespace kestrel_cuda {

// Unless KESTREL_CUDA_DISABLE_LT=1 (read once): LINEAR and 2-D GEMMs try cuBLASLt first.
bool lt_enabled();

// z (M,N) = x (M,K) @ w (K,N) [+ bias (N)] as one cuBLASLt call on s. x and w
// row- or column-major, z's rows contiguous; all f32, f16 or bf16 alike. False, with nothing enqueued,
// where cuBLASLt declines the problem: the caller computes it otherwise.
bool linear_by_lt(kestrel_stream& s, const kestrel_tensor& x, const kestrel_tensor& w, const kestrel_tensor* bias,
                  const kestrel_tensor& z);

// c (M,N) = alpha * a (M,K) @ b (K,N) + beta * c, rank 2: a and b row- or column-major, c's rows contiguous;
// a and b f32, f16 or bf16 alike, c theirs or (ABI 1.6) f32 for 16-bit operands; with row_sums ((M),
// contiguous, c's dtype) also a's rows summed over K, written, in the same call (the BGRADB epilogue).
// False, with nothing enqueued, where cuBLASLt declines.
bool gemm_by_lt(kestrel_stream& s, const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c, double alpha,
                double beta, const kestrel_tensor* row_sums = nullptr);

}  // namespace kestrel_cuda
