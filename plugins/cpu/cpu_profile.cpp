// KESTREL_CPU_PROFILE=1: host time per kind of op, printed to stderr when the process exits. Every op
// runs to completion inside its launch on this backend, so a clock around the launch times the work
// itself. GEMMs and linear ops are keyed by their sizes (m x n x k), convolutions by their weight's
// (O x C x KH x KW) and output image (OH x OW): they are what a step is made of. Copies, casts and
// element-wise ops by their dtypes and element count, which tells the casts mixed precision adds apart.
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "cpu_context.hpp"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cpu {

namespace {

const char* dtype_key(kestrel_dtype dtype) {
  static const char* const names[KESTREL_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "i64", "u8", "f64"};
  return unsigned(dtype) < KESTREL_DTYPE_COUNT ? names[dtype] : "?";
}

std::string key_of(const kestrel_op& op) {
  std::string key = kestrel::plugin_sdk::op_kind_name(op.kind);
  if ((op.kind == KESTREL_OP_GEMM || op.kind == KESTREL_OP_LINEAR) && op.num_inputs >= 2 && op.num_outputs >= 1) {
    const kestrel_tensor &a = op.inputs[0], &c = op.outputs[0];
    if (a.rank >= 2 && c.rank >= 2)
      key += " " + std::to_string(c.shape[c.rank - 2]) + "x" + std::to_string(c.shape[c.rank - 1]) + "x" +
             std::to_string(a.shape[a.rank - 1]);
  }
  const bool conv = op.kind == KESTREL_OP_CONV2D || op.kind == KESTREL_OP_CONV2D_BACKWARD_DATA ||
                    op.kind == KESTREL_OP_CONV2D_BACKWARD_FILTER;
  if (conv && op.num_inputs >= 2 && op.num_outputs >= 1) {
    // The weight is in1, or the filter gradient's out0; the output gradient (or output) in0 or out0.
    const kestrel_tensor& w = op.kind == KESTREL_OP_CONV2D_BACKWARD_FILTER ? op.outputs[0] : op.inputs[1];
    const kestrel_tensor& y = op.kind == KESTREL_OP_CONV2D ? op.outputs[0] : op.inputs[0];
    if (w.rank == 4 && y.rank == 4)
      key += " " + std::to_string(w.shape[0]) + "x" + std::to_string(w.shape[1]) + "x" + std::to_string(w.shape[2]) +
             "x" + std::to_string(w.shape[3]) + " " + std::to_string(y.shape[2]) + "x" + std::to_string(y.shape[3]);
  }
  const bool elementwise = op.kind == KESTREL_OP_COPY || op.kind == KESTREL_OP_UNARY || op.kind == KESTREL_OP_BINARY;
  if (elementwise && op.num_inputs >= 1 && op.num_outputs >= 1) {
    int64_t numel = 1;
    for (int d = 0; d < op.outputs[0].rank; ++d) numel *= op.outputs[0].shape[d];
    key += std::string(" ") + dtype_key(op.inputs[0].dtype) + "->" + dtype_key(op.outputs[0].dtype) + " " +
           std::to_string(numel);
  }
  return key;
}

struct Total {
  double seconds = 0;
  uint64_t launches = 0;
};

struct Profile {
  std::mutex mutex;
  std::map<std::string, Total> totals;
  ~Profile() {
    double all = 0;
    for (const auto& [key, total] : totals) all += total.seconds;
    std::fprintf(stderr, "kestrel cpu profile (host time inside launches, %.3f s in all):\n", all);
    for (const auto& [key, total] : totals)
      std::fprintf(stderr, "  %-32s %8llu launches %10.3f ms %6.1f%%\n", key.c_str(),
                   static_cast<unsigned long long>(total.launches), total.seconds * 1e3,
                   all > 0 ? 100.0 * total.seconds / all : 0.0);
  }
};

}  // namespace

bool profiling() {
  static const bool enabled = kestrel::plugin_env::flag("KESTREL_CPU_PROFILE");
  return enabled;
}

void run_profiled(const kestrel_op& op, void (*launch)(const kestrel_op&)) {
  static Profile profile;  // destroyed, and printed, at exit
  const auto start = std::chrono::steady_clock::now();
  launch(op);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(profile.mutex);
  Total& total = profile.totals[key_of(op)];
  total.seconds += seconds;
  total.launches += 1;
}

}  // namespace kestrel_cpu
