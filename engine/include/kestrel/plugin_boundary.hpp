// Plugin SDK (header-only, C++): what every C++ plugin does at its boundary, written once — supports_op
// and the checks before a launch (descriptors readable, family implemented, every tensor inside its
// buffer), byte ranges of copies, parameter blocks, and dtype dispatch. Kernels and capability checks
// stay in the plugin.
//
// The checks that read a buffer's size are templates on the tensor or buffer type: each plugin defines
// kestrel_buffer itself (with a `bytes` member, the size the host asked for), so the size is looked up
// where the template is used, inside the plugin.
#ifndef KESTREL_PLUGIN_BOUNDARY_HPP
#define KESTREL_PLUGIN_BOUNDARY_HPP

#include <cstdint>
#include <string>
#include <type_traits>

#include "kestrel/plugin.h"
#include "kestrel/plugin_errors.hpp"
#include "kestrel/plugin_families.hpp"
#include "kestrel/plugin_shapes.hpp"

namespace kestrel::plugin_sdk {

using plugin_errors::fail;

// supports_op: the op block and its tensors are readable, the plugin implements the family, and the
// family's supports (called with `extra`, e.g. the device's dtypes) accepts it.
template <class Entry, class... Extra>
int32_t supports(const FamilyTable<Entry>& table, const kestrel_op* op, Extra... extra) {
  if (!plugin_shapes::valid_op(op)) return 0;
  const Entry* entry = table.find(op->kind);
  return entry && entry->supports(*op, extra...) ? 1 : 0;
}

// Every element `t` reaches lies inside its buffer.
template <class Tensor>
void check_in_buffer(const Tensor& t, const char* role) {
  if (!t.buffer) fail(std::string(role) + " tensor has no buffer");
  if (plugin_shapes::numel(t) == 0) return;
  const int64_t last = plugin_shapes::last_element(t);
  const uint64_t bytes = uint64_t(t.buffer->bytes), width = plugin_shapes::dtype_bytes(t.dtype);
  if (last < 0 || uint64_t(last) >= bytes / width)
    fail(std::string(role) + " tensor reaches element " + std::to_string(last) + ", past the end of its " +
         std::to_string(bytes) + "-byte buffer");
}

template <class Op>
void check_in_buffers(const Op& op) {
  for (int i = 0; i < op.num_inputs; ++i) check_in_buffer(op.inputs[i], "input");
  for (int i = 0; i < op.num_outputs; ++i) check_in_buffer(op.outputs[i], "output");
}

// What launch checks before a family runs: the op is supported — else UNSUPPORTED with `refusal`, the
// plugin's account of what it runs — and every tensor lies inside its buffer.
template <class Op>
void check_launchable(bool supported, const Op* op, const std::string& refusal) {
  if (!supported) fail(refusal, KESTREL_STATUS_UNSUPPORTED);
  check_in_buffers(*op);
}

// `bytes` at byte `offset` lie inside `buffer`: the check of every copy entry.
template <class Buffer>
void check_copy_range(const Buffer* buffer, uint64_t offset, uint64_t bytes, const char* what) {
  if (!buffer) fail(std::string(what) + ": null buffer");
  if (offset > buffer->bytes || bytes > buffer->bytes - offset)
    fail(std::string(what) + ": " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
         " overrun a buffer of " + std::to_string(buffer->bytes) + " bytes");
}

// The op's parameter block, which supports_op has seen; a launch without it fails naming the op.
template <class P>
const P& params_of(const kestrel_op& op, const char* name) {
  const P* p = plugin_shapes::params<P>(op);
  if (!p) fail(std::string(name) + ": missing or too-small parameter block");
  return *p;
}

// The base of a plugin's element types: the storage type S of a dtype D in memory and the type C it
// is computed in (f16 is stored as uint16_t bits and computed in f32; integers computed in 64 bits).
// Each plugin adds its own load(S) -> C and store(C) -> S, as host or device code.
template <class S, class C, kestrel_dtype D>
struct ElemBase {
  using storage = S;
  using compute = C;
  static constexpr kestrel_dtype dtype = D;
  static constexpr bool is_float = std::is_floating_point<C>::value;
};

// Calls fn(E{}) for the element type E among Elems whose `dtype` is `dtype`; each plugin lists its own
// element types (storage and compute types, loads and stores for its kind of code):
//   constexpr kestrel::plugin_sdk::Dispatch<F32, F64, F16, BF16> dispatch_float{"a floating-point dtype"};
template <class... Elems>
struct Dispatch {
  const char* wanted;  // finishes "this op needs ..." when no type matches
  template <class Fn>
  void operator()(kestrel_dtype dtype, Fn&& fn) const {
    const bool found = ((dtype == Elems::dtype ? (fn(Elems{}), true) : false) || ...);
    if (!found) fail(std::string("this op needs ") + wanted + ", not dtype code " + std::to_string(int(dtype)));
  }
};

}  // namespace kestrel::plugin_sdk

#endif  // KESTREL_PLUGIN_BOUNDARY_HPP
