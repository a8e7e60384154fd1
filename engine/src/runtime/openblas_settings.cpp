// OpenBLAS reads its settings from the environment when it is loaded, which for Kestrel is when the CPU
// plugin loads, so the engine sets them just before loading plugins. Values the user set are left alone.
//
// OPENBLAS_CORETYPE: Debian's OpenBLAS 0.3.21 (built with DYNAMIC_ARCH) picks its kernels from the CPU
// model. On CPUs it does not know by model — common under virtual machines, which report a generic
// "Intel Xeon Processor" — it falls back to its Prescott (SSE3) kernels: sgemm then runs ~5x slower
// than with the AVX-512 kernels the same CPU can use (measured: 50 ms vs 10 ms for the seeds' MLP
// GEMMs). The engine names the core type from the CPU's instruction sets.

#include <cstdlib>

#include "plugin_search.h"

namespace kestrel {

namespace {

void choose_core_type() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const char* core = nullptr;
  // The f32 GEMM kernels OpenBLAS has for these instruction sets; newer Intel and AMD Zen 4 cores run the
  // SkylakeX ones, Zen 1-3 the Haswell ones (which OpenBLAS also uses for them).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq"))
    core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    core = "Haswell";
  if (core) setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
#endif
}

}  // namespace

void choose_openblas_settings() {
  // OPENBLAS_THREAD_TIMEOUT (how long idle workers spin before they sleep) is left at OpenBLAS's
  // default: a short one (18) freed the cores for the CPU plugin's update threads but made steps wait
  // for sleeping workers (seeds' MLP step/GEMMs rounds up to 3.2x; bench/results/
  // 2026-11-22-vm-cpu-step-overhead.md).
  if (!std::getenv("OPENBLAS_CORETYPE")) choose_core_type();
}

}  // namespace kestrel
