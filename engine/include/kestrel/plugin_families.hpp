// Plugin SDK (header-only, C++): op families — the op kinds a plugin implements together, one
// supports/launch pair each — their names, and the table through which a plugin dispatches. A family a
// plugin does not list is unsupported (supports_op answers 0, launch fails with UNSUPPORTED), so a new
// fused family is added to one backend at a time, and an op kind from a later ABI version is unknown
// here and unsupported too.
#ifndef KESTREL_PLUGIN_FAMILIES_HPP
#define KESTREL_PLUGIN_FAMILIES_HPP

#include <cstddef>
#include <initializer_list>

#include "kestrel/plugin.h"

namespace kestrel::plugin_sdk {

enum class OpFamily {
  fill, copy, unary, binary, reduce, gemm, gather, scatter_add, random, window, linear, softmax,
  softmax_cross_entropy, optimizer, attention, layer_norm, lstm_cell, gru_cell, conv, recurrent_layer,
  count  // also the answer for a kind this header does not know (a newer ABI's)
};

inline OpFamily op_family(kestrel_op_kind kind) {
  switch (kind) {
    case KESTREL_OP_FILL: return OpFamily::fill;
    case KESTREL_OP_COPY: return OpFamily::copy;
    case KESTREL_OP_UNARY: return OpFamily::unary;
    case KESTREL_OP_BINARY: return OpFamily::binary;
    case KESTREL_OP_REDUCE: return OpFamily::reduce;
    case KESTREL_OP_GEMM: return OpFamily::gemm;
    case KESTREL_OP_GATHER: return OpFamily::gather;
    case KESTREL_OP_SCATTER_ADD: return OpFamily::scatter_add;
    case KESTREL_OP_RANDOM: return OpFamily::random;
    case KESTREL_OP_IM2COL: case KESTREL_OP_COL2IM: case KESTREL_OP_POOL2D: case KESTREL_OP_POOL2D_BACKWARD:
      return OpFamily::window;
    case KESTREL_OP_LINEAR: return OpFamily::linear;
    case KESTREL_OP_SOFTMAX: return OpFamily::softmax;
    case KESTREL_OP_SOFTMAX_CROSS_ENTROPY: case KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD:
      return OpFamily::softmax_cross_entropy;
    case KESTREL_OP_ADAM_UPDATE: case KESTREL_OP_SGD_UPDATE: return OpFamily::optimizer;
    case KESTREL_OP_ATTENTION: case KESTREL_OP_ATTENTION_BACKWARD: return OpFamily::attention;
    case KESTREL_OP_LAYER_NORM: case KESTREL_OP_LAYER_NORM_BACKWARD: return OpFamily::layer_norm;
    case KESTREL_OP_LSTM_CELL: case KESTREL_OP_LSTM_CELL_BACKWARD: return OpFamily::lstm_cell;
    case KESTREL_OP_GRU_CELL: case KESTREL_OP_GRU_CELL_BACKWARD: return OpFamily::gru_cell;
    case KESTREL_OP_CONV2D: case KESTREL_OP_CONV2D_BACKWARD_DATA: case KESTREL_OP_CONV2D_BACKWARD_FILTER:
      return OpFamily::conv;
    case KESTREL_OP_RECURRENT_LAYER: case KESTREL_OP_RECURRENT_LAYER_BACKWARD: return OpFamily::recurrent_layer;
  }
  return OpFamily::count;
}

// A plugin's dispatch table: for each family it implements, an Entry (its supports/launch pair, in
// whatever signature the plugin uses). Built once from rows; families not named stay unsupported.
template <class Entry>
class FamilyTable {
 public:
  struct Row {
    OpFamily family;
    Entry entry;
  };
  FamilyTable(std::initializer_list<Row> rows) {
    for (const Row& row : rows) {
      entries_[size_t(row.family)] = row.entry;
      present_[size_t(row.family)] = true;
    }
  }
  // The entry for an op kind, or nullptr when the plugin does not implement its family.
  const Entry* find(kestrel_op_kind kind) const {
    const size_t family = size_t(op_family(kind));
    return family < size_t(OpFamily::count) && present_[family] ? &entries_[family] : nullptr;
  }

 private:
  Entry entries_[size_t(OpFamily::count)]{};
  bool present_[size_t(OpFamily::count)]{};
};

// A row for a plugin that names its functions supports_<family> and launch_<family>.
#define KESTREL_FAMILY(family) \
  { kestrel::plugin_sdk::OpFamily::family, {supports_##family, launch_##family} }
// The rows of the required primitives, which every plugin implements (plugin.h).
#define KESTREL_REQUIRED_FAMILIES                                                                      \
  KESTREL_FAMILY(fill), KESTREL_FAMILY(copy), KESTREL_FAMILY(unary), KESTREL_FAMILY(binary),             \
      KESTREL_FAMILY(reduce), KESTREL_FAMILY(gemm), KESTREL_FAMILY(gather), KESTREL_FAMILY(scatter_add), \
      KESTREL_FAMILY(random), KESTREL_FAMILY(window)

// The op kind's name as tools and messages show it (the engine's kestrel::op_kind_name returns this).
inline const char* op_kind_name(kestrel_op_kind kind) {
  switch (kind) {
    case KESTREL_OP_FILL: return "fill";
    case KESTREL_OP_COPY: return "copy";
    case KESTREL_OP_UNARY: return "unary";
    case KESTREL_OP_BINARY: return "binary";
    case KESTREL_OP_REDUCE: return "reduce";
    case KESTREL_OP_GEMM: return "gemm";
    case KESTREL_OP_GATHER: return "gather";
    case KESTREL_OP_SCATTER_ADD: return "scatter_add";
    case KESTREL_OP_RANDOM: return "random";
    case KESTREL_OP_IM2COL: return "im2col";
    case KESTREL_OP_COL2IM: return "col2im";
    case KESTREL_OP_POOL2D: return "pool2d";
    case KESTREL_OP_POOL2D_BACKWARD: return "pool2d_backward";
    case KESTREL_OP_LINEAR: return "linear";
    case KESTREL_OP_SOFTMAX: return "softmax";
    case KESTREL_OP_SOFTMAX_CROSS_ENTROPY: return "softmax_cross_entropy";
    case KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD: return "softmax_cross_entropy_backward";
    case KESTREL_OP_ADAM_UPDATE: return "adam_update";
    case KESTREL_OP_SGD_UPDATE: return "sgd_update";
    case KESTREL_OP_ATTENTION: return "attention";
    case KESTREL_OP_ATTENTION_BACKWARD: return "attention_backward";
    case KESTREL_OP_LAYER_NORM: return "layer_norm";
    case KESTREL_OP_LAYER_NORM_BACKWARD: return "layer_norm_backward";
    case KESTREL_OP_LSTM_CELL: return "lstm_cell";
    case KESTREL_OP_LSTM_CELL_BACKWARD: return "lstm_cell_backward";
    case KESTREL_OP_GRU_CELL: return "gru_cell";
    case KESTREL_OP_GRU_CELL_BACKWARD: return "gru_cell_backward";
    case KESTREL_OP_CONV2D: return "conv2d";
    case KESTREL_OP_CONV2D_BACKWARD_DATA: return "conv2d_backward_data";
    case KESTREL_OP_CONV2D_BACKWARD_FILTER: return "conv2d_backward_filter";
    case KESTREL_OP_RECURRENT_LAYER: return "recurrent_layer";
    case KESTREL_OP_RECURRENT_LAYER_BACKWARD: return "recurrent_layer_backward";
  }
  return "unknown-op";
}

}  // namespace kestrel::plugin_sdk

#endif  // KESTREL_PLUGIN_FAMILIES_HPP
