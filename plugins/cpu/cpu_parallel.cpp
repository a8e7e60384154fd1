#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include <cstdlib>

#include "cpu_parallel.hpp"

namespace kestrel_cpu {

int host_threads() {
  static const int threads = [] {
    if (Exec().concurrency() > 1) return 1;
    const char* asked = std::getenv("KESTREL_CPU_UPDATE_THREADS");
    const long n = asked ? std::strtol(asked, nullptr, 10) : long(std::thread::hardware_concurrency());
    return int(std::clamp(n, 1L, 64L));
  }();
  return threads;
}

// A new thread starts on its creator's core, and a loop of a few milliseconds ends before the scheduler
// moves it, while the other cores may be running nothing but OpenBLAS's idle worker, which keeps
// spinning (and yielding) for a while after each GEMM. Measured in a seeds'-MLP training step: the Adam
// update took 3.1-3.6 ms with its helper left alone, 1.8-2.2 ms with the helper kept off the caller's
// core. The process's own affinity (taskset, cgroups) is respected.
void keep_off_this_core(std::thread& helper) {
#ifdef __linux__
  cpu_set_t allowed;
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return;
  const int here = sched_getcpu();
  if (here < 0 || !CPU_ISSET(here, &allowed) || CPU_COUNT(&allowed) < 2) return;
  CPU_CLR(here, &allowed);
  pthread_setaffinity_np(helper.native_handle(), sizeof(allowed), &allowed);  // a hint: failing is harmless
#else
  (void)helper;
#endif
}

}  // namespace kestrel_cpu
