// Row access for the recurrent cells (ops_lstm_cell.cpp, ops_gru_cell.cpp): (rows, cols) tensors whose
// rows are contiguous but may be strided (a step's slice of the whole sequence's input product).
#pragma once
#include <cstdint>

#include "kestrel/plugin.h"

namespace kestrel_cpu {

// Row r of a (rows, cols) tensor whose rows are contiguous.
template <class S>
struct Rows {
  S* base;
  int64_t stride;
  S* operator[](int64_t r) const { return base + r * stride; }
};
template <class S>
Rows<const S> rows_of(const kestrel_tensor& t) {
  return {static_cast<const S*>(t.buffer->data) + t.offset, t.strides[0]};
}
template <class S>
Rows<S> mutable_rows_of(const kestrel_tensor& t) {
  return {static_cast<S*>(t.buffer->data) + t.offset, t.strides[0]};
}

// The pool splits loops by elements touched; a gate element costs a transcendental function or two,
// several times a plain element, so the rows count this many times over.
constexpr int64_t kTranscendentalWeight = 8;

}  // namespace kestrel_cpu
