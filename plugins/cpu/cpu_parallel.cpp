#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cpu_parallel.hpp"

namespace kestrel_cpu {

namespace {
std::atomic<bool> forked{false};
}  // namespace

void watch_for_fork() {
  static const int registered = pthread_atfork(nullptr, nullptr, [] { forked.store(true); });
  (void)registered;
}

bool in_forked_child() { return forked.load(std::memory_order_relaxed); }

int host_threads() {
  static const int threads = [] {
    if (Exec().concurrency() > 1) return int(Exec().concurrency());
    const char* asked = std::getenv("KESTREL_CPU_THREADS");
    if (!asked) asked = std::getenv("KESTREL_CPU_UPDATE_THREADS");
    // omp_get_max_threads: OMP_NUM_THREADS, else the CPUs in the process's affinity mask (taskset, cpusets).
    const long n = asked ? std::strtol(asked, nullptr, 10) : long(omp_get_max_threads());
    return int(std::clamp(n, 1L, 256L));
  }();
  return threads;
}

namespace {

// One loop on the threads: pieces of [0, count) handed out through a shared counter.
struct Loop {
  ChunkRef chunk;
  int64_t count, piece;
  std::atomic<int64_t> next{0};

  void take_pieces() {
    for (int64_t begin = next.fetch_add(piece); begin < count; begin = next.fetch_add(piece))
      chunk.call(chunk.self, begin, std::min(count, begin + piece));
  }
};

}  // namespace

// The threads are OpenMP's (libgomp's): with an OpenMP Kokkos they are Kokkos's own, and the GEMMs run on
// them too (OpenBLAS's OpenMP build, plugins/cpu/CMakeLists.txt), so element-wise loops and BLAS share one
// set of threads rather than two sets spinning against each other. Between loops libgomp lets them spin
// a while before it parks them (OMP_WAIT_POLICY, GOMP_SPINCOUNT), as the former pool did.
// This replaced a pool of the plugin's own threads: side by side it was level on the MLP (within the
// rounds' noise) and faster on the ConvNet and the sequence models
// (bench/results/2026-11-26-vm-cpu-openmp-kokkos.md).
void run_pieces(const char* label, int threads, int64_t count, ChunkRef chunk) {
  static std::mutex in_use;  // one loop on the threads at a time; other callers run theirs alone
  std::unique_lock<std::mutex> mine(in_use, std::try_to_lock);
  if (!mine.owns_lock() || threads <= 1 || in_forked_child()) {
    chunk.call(chunk.self, 0, count);
    return;
  }
  // A few pieces per thread, so that threads that run take over the work of one that is held up.
  Loop loop{chunk, count, std::max<int64_t>(1, count / (int64_t(threads) * 4))};
  static const bool kokkos_has_threads = Exec().concurrency() > 1;
  if (kokkos_has_threads) {  // one index each for `threads` of Kokkos's threads
    Kokkos::parallel_for(label, Range(0, threads, Kokkos::ChunkSize(1)), [&](int64_t) { loop.take_pieces(); });
    return;
  }
#pragma omp parallel num_threads(threads)
  loop.take_pieces();
}

}  // namespace kestrel_cpu
