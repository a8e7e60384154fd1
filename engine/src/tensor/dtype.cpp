#include "kestrel/dtype.h"

#include <fmt/format.h>

#include <cstring>

#include "kestrel/error.h"

namespace kestrel {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i64: case DType::f64: return 8;
    case DType::u8: return 1;
  }
  throw InvalidArgument(fmt::format("unknown dtype code {}", static_cast<int>(dtype)));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::f64: return "f64";
  }
  return "?";
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f64;
}

DType parse_dtype(std::string_view name) {
  for (DType dtype : all_dtypes)
    if (dtype_name(dtype) == name) return dtype;
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "float16" || name == "half") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float64" || name == "double") return DType::f64;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint8") return DType::u8;
  throw InvalidArgument(fmt::format("unknown dtype '{}': expected one of f32, f16, bf16, f64, i32, i64, u8", name));
}

namespace {
double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return kestrel_f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return kestrel_bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
  }
  return 0;
}

void store_from_double(void* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = kestrel_f32_to_f16(static_cast<float>(v)); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = kestrel_f32_to_bf16(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
  }
}
}  // namespace

void convert_host_elements(const void* source, DType from, void* destination, DType to, int64_t count) {
  if (from == to) {
    if (count > 0) std::memcpy(destination, source, count * dtype_size(from));  // empty tensors may have no data
    return;
  }
  for (int64_t i = 0; i < count; ++i) store_from_double(destination, to, i, load_as_double(source, from, i));
}

}  // namespace kestrel
