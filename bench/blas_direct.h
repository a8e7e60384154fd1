// The direct-BLAS baselines call cblas_sgemm in the very BLAS library the CPU plugin loaded, resolved
// at run time instead of linked: a library linked into the benchmark would be loaded (and would pick
// its kernels) before the engine sets OPENBLAS_CORETYPE, and both sides must run the same kernels.
#pragma once
#include <cblas.h>
#include <dlfcn.h>

#include <stdexcept>

#include "kestrel/engine.h"

namespace kestrel_bench {

using SgemmFn = decltype(&cblas_sgemm);  // the declaration only: nothing here links the library

// Call after the engine has loaded its plugins (Engine::global()).
inline SgemmFn direct_sgemm() {
  kestrel::Engine::global();
  for (const char* library : {"libopenblas.so.0", "libblas.so.3"}) {
    // RTLD_NOLOAD: the instance the CPU plugin already loaded, if any.
    void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
    if (!handle) handle = dlopen(library, RTLD_NOW);
    if (handle)
      if (auto fn = reinterpret_cast<SgemmFn>(dlsym(handle, "cblas_sgemm"))) return fn;
  }
  throw std::runtime_error("no BLAS library with cblas_sgemm found (libopenblas.so.0, libblas.so.3)");
}

}  // namespace kestrel_bench
