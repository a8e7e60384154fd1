// How cuBLAS and cuBLASLt see the engine's row-major matrices: both libraries are column-major, so each
// operand is classified from its strides. Row-major (strides (ld, 1)) reads as its own transpose in
// column-major order; column-major (strides (1, ld)), which is how the engine hands over transposes, as
// itself. Shared by ops_gemm.cu (cuBLAS) and cublaslt_products.cpp (cuBLASLt).
#pragma once
#include <algorithm>
#include <cstdint>

#include <library_types.h>

#include "kestrel/plugin.h"

namespace kestrel_cuda {

enum class Order { row, col, none };
struct Classified {
  Order order;
  int64_t ld;
};

// A rows x cols matrix with row stride rs and column stride cs; `none` when it is neither row- nor
// column-major with a leading dimension (every-other-element slices, stride-0 rows), which must be packed.
inline Classified classify(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) return {Order::row, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) return {Order::col, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
  return {Order::none, 0};
}

inline cudaDataType cuda_type(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F64: return CUDA_R_64F;
    case KESTREL_DTYPE_F16: return CUDA_R_16F;
    case KESTREL_DTYPE_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

}  // namespace kestrel_cuda
