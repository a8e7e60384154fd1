#include "kestrel/ops.h"
#include "kestrel/plugin_families.hpp"

namespace kestrel {

const char* op_kind_name(kestrel_op_kind kind) { return plugin_sdk::op_kind_name(kind); }

const char* unary_fn_name(kestrel_unary_fn fn) {
  static const char* names[] = {"neg",  "abs",       "exp",  "log",    "sqrt",       "rsqrt", "tanh",   "sigmoid", "relu",
                                "gelu", "gelu_grad", "step", "square", "reciprocal", "sign",  "affine", "pow"};
  return fn >= 0 && fn <= KESTREL_UNARY_POW ? names[fn] : "unknown-unary";
}

const char* binary_fn_name(kestrel_binary_fn fn) {
  static const char* names[] = {"add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge",
                                "relu_backward", "gelu_backward"};
  return fn >= 0 && fn <= KESTREL_BINARY_GELU_BACKWARD ? names[fn] : "unknown-binary";
}

const char* reduce_fn_name(kestrel_reduce_fn fn) {
  static const char* names[] = {"sum", "mean", "max", "min", "argmax", "max_abs", "sum_squares"};
  return fn >= 0 && fn <= KESTREL_REDUCE_SUM_SQUARES ? names[fn] : "unknown-reduce";
}

}  // namespace kestrel
