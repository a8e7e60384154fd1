// Element types: the C++ face of kestrel_dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kestrel/half.h"  // f16/bf16 <-> f32 conversions
#include "kestrel/plugin.h"

namespace kestrel {

enum class DType : int32_t {
  f32 = KESTREL_DTYPE_F32,
  f16 = KESTREL_DTYPE_F16,
  bf16 = KESTREL_DTYPE_BF16,
  i32 = KESTREL_DTYPE_I32,
  i64 = KESTREL_DTYPE_I64,
  u8 = KESTREL_DTYPE_U8,
  f64 = KESTREL_DTYPE_F64,
};

inline constexpr DType all_dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32,
                                       DType::i64, DType::u8,  DType::f64};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);
DType parse_dtype(std::string_view name);  // throws InvalidArgument listing the valid names
// Converts `count` elements between dtypes on the host (floats via double; f16/bf16 round to nearest).
void convert_host_elements(const void* source, DType from, void* destination, DType to, int64_t count);
inline kestrel_dtype to_c(DType dtype) { return static_cast<kestrel_dtype>(dtype); }

}  // namespace kestrel
