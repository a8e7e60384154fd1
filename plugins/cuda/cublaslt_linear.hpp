// LINEAR's product through cuBLASLt with the bias and ReLU in its epilogue (cublaslt_linear.cpp).
#pragma once
#include "cuda_ops.hpp"

namespace kestrel_cuda {

// KESTREL_CUDA_LINEAR_LT=1 (read once): LINEAR tries cuBLASLt first.
bool linear_lt_enabled();

// z (M,N) = x (M,K) @ w (K,N) [+ bias (N)], then max(z, 0) when relu, as one cuBLASLt call on s. x and w
// row- or column-major, z's rows contiguous; all f32, f16 or bf16 alike. False, with nothing enqueued,
// where cuBLASLt declines the problem: the caller computes it otherwise.
bool linear_by_lt(kestrel_stream& s, const kestrel_tensor& x, const kestrel_tensor& w, const kestrel_tensor* bias,
                  const kestrel_tensor& z, bool relu);

}  // namespace kestrel_cuda
