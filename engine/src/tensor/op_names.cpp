#include "kestrel/ops.h"

namespace kestrel {

const char* op_kind_name(kestrel_op_kind kind) {
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
    case KESTREL_OP_ADAM_UPDATE: return "adam_update";
    case KESTREL_OP_SGD_UPDATE: return "sgd_update";
  }
  return "unknown-op";
}

const char* unary_fn_name(kestrel_unary_fn fn) {
  static const char* names[] = {"neg",  "abs",       "exp",  "log",    "sqrt",       "rsqrt", "tanh",   "sigmoid", "relu",
                                "gelu", "gelu_grad", "step", "square", "reciprocal", "sign",  "affine", "pow"};
  return fn >= 0 && fn <= KESTREL_UNARY_POW ? names[fn] : "unknown-unary";
}

const char* binary_fn_name(kestrel_binary_fn fn) {
  static const char* names[] = {"add", "sub", "mul", "div", "max", "min", "pow",
                                "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  return fn >= 0 && fn <= KESTREL_BINARY_GE ? names[fn] : "unknown-binary";
}

const char* reduce_fn_name(kestrel_reduce_fn fn) {
  static const char* names[] = {"sum", "mean", "max", "min", "argmax"};
  return fn >= 0 && fn <= KESTREL_REDUCE_ARGMAX ? names[fn] : "unknown-reduce";
}

}  // namespace kestrel
