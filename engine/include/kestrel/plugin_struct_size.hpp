// Plugin SDK (header-only, C++): the struct_size of every struct in plugin.h, named once — the end of
// its last field (KESTREL_STRUCT_SIZE), never sizeof, whose tail padding would hide a field appended in
// a later minor version. The host writes its structs with these sizes and C++ plugins check what they
// are handed against them, so both sides measure the same way.
#ifndef KESTREL_PLUGIN_STRUCT_SIZE_HPP
#define KESTREL_PLUGIN_STRUCT_SIZE_HPP

#include <cstddef>

#include "kestrel/plugin.h"

namespace kestrel {

// Defined only for the structs listed below: a struct added to plugin.h without a line here does not compile.
template <class T>
struct AbiStruct;

#define KESTREL_ABI_STRUCT(type, last_field) \
  template <>                                \
  struct AbiStruct<type> {                   \
    static constexpr size_t size = KESTREL_STRUCT_SIZE(type, last_field); \
  };

KESTREL_ABI_STRUCT(kestrel_probe_result, reason)
KESTREL_ABI_STRUCT(kestrel_device_properties, gemm_row_alignment)
KESTREL_ABI_STRUCT(kestrel_memory_stats, alloc_count)
KESTREL_ABI_STRUCT(kestrel_tensor, strides)
KESTREL_ABI_STRUCT(kestrel_fill_params, value)
KESTREL_ABI_STRUCT(kestrel_unary_params, beta)
KESTREL_ABI_STRUCT(kestrel_binary_params, fn)
KESTREL_ABI_STRUCT(kestrel_reduce_params, fn)
KESTREL_ABI_STRUCT(kestrel_gemm_params, beta)
KESTREL_ABI_STRUCT(kestrel_index_params, axis)
KESTREL_ABI_STRUCT(kestrel_random_params, b)
KESTREL_ABI_STRUCT(kestrel_window_params, mode)
KESTREL_ABI_STRUCT(kestrel_linear_params, activation)
KESTREL_ABI_STRUCT(kestrel_conv_params, activation)
KESTREL_ABI_STRUCT(kestrel_softmax_params, log)
KESTREL_ABI_STRUCT(kestrel_adam_params, scaler)
KESTREL_ABI_STRUCT(kestrel_sgd_params, step)
KESTREL_ABI_STRUCT(kestrel_attention_params, key_padding)
KESTREL_ABI_STRUCT(kestrel_layer_norm_params, eps)
KESTREL_ABI_STRUCT(kestrel_recurrent_params, cell)
KESTREL_ABI_STRUCT(kestrel_op, params)
KESTREL_ABI_STRUCT(kestrel_plugin_api, op_saved_bytes)

#undef KESTREL_ABI_STRUCT

// What this side writes into struct_size for T.
template <class T>
constexpr size_t abi_size = AbiStruct<T>::size;

// Sets struct_size for the type of `value` (deduced, so a block cannot be given another struct's size).
template <class T>
void set_abi_size(T& value) {
  value.struct_size = abi_size<T>;
}

// A zeroed T with struct_size set, ready to hand over.
template <class T>
T abi_init() {
  T value{};
  value.struct_size = abi_size<T>;
  return value;
}

// Whether a block handed over is present and holds every field this side knows of T.
template <class T>
bool abi_complete(const T* value) {
  return value && value->struct_size >= abi_size<T>;
}

}  // namespace kestrel

#endif  // KESTREL_PLUGIN_STRUCT_SIZE_HPP
