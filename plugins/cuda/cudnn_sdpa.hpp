// f16/bf16 attention through cuDNN's fused scaled-dot-product attention (cudnn_sdpa.cpp), built where
// CMake found the cuDNN frontend's headers (KESTREL_CUDA_SDPA).
#pragma once
#include "cuda_ops.hpp"

namespace kestrel_cuda {

// Runs the ATTENTION or ATTENTION_BACKWARD `op` (which supports_attention accepted) through cuDNN when
// cuDNN computes exactly what it asks; false when it does not, and the caller runs its own kernels.
bool sdpa_try(kestrel_stream& s, const kestrel_op& op);

}  // namespace kestrel_cuda
