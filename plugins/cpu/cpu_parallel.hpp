// Threads for large loops. Kokkos spreads a parallel_for over its execution space's threads, but
// Debian's Kokkos is Serial-only, so on its own the plugin would run every element-wise op and optimizer
// update on one core while OpenBLAS uses all of them for the GEMMs. Large loops are therefore spread over
// OpenMP's threads: Kokkos's own when Kokkos was built with OpenMP, and the same threads OpenBLAS's OpenMP
// build runs the GEMMs on. A loop gets threads only when it is large enough to pay for waking them; small
// loops (an LSTM step's are many) run on the calling thread. Threads should read whole rows in order: on
// the 2-core VM, two threads that each walked every row a block of columns at a time (column sums, an
// embedding's gradient) took 1.5-3x longer than one thread reading the rows in order (bench_ops
// sum_columns and embedding_grad).
// Every piece writes its own outputs, and pieces are cut where the thread count does not decide (the
// serial loop's order, or fixed blocks combined in order), so results do not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>

#include "cpu_common.hpp"

namespace kestrel_cpu {

// One thread per this many elements touched: below it a thread costs more to wake than it saves.
constexpr int64_t kGrain = int64_t(1) << 15;

// Kokkos's thread count when it has several; otherwise KESTREL_CPU_THREADS (KESTREL_CPU_UPDATE_THREADS,
// its earlier name, is read too), else OpenMP's (OMP_NUM_THREADS, or the CPUs the process may run on).
int host_threads();

// A child forked after the parent's OpenMP threads ran has none of them, and libgomp would wait for them
// for good at the child's first parallel region (Python's multiprocessing forks; so do death tests). So
// in a forked child the plugin's loops run on the calling thread, the GEMMs on one BLAS thread, and
// Kokkos is not finalised at exit (its OpenMP backend's finalisation is a parallel region too), as
// PyTorch's intra-op threads do after fork. watch_for_fork registers the handler; the plugin calls it
// when it initialises.
void watch_for_fork();
bool in_forked_child();

// How many threads a loop of `count` indices touching `elements` elements in all gets.
inline int threads_for(int64_t count, int64_t elements) {
  return int(std::clamp<int64_t>(std::min<int64_t>(elements / kGrain, count), 1, host_threads()));
}

// A type-erased reference to chunk(begin, end), valid while the lambda lives.
struct ChunkRef {
  void (*call)(const void* self, int64_t begin, int64_t end);
  const void* self;
};

// Runs chunk over [0, count) in pieces on `threads` OpenMP threads (the caller among them). Pieces are
// handed out one at a time rather than in equal shares: a thread's core may be busy for a while (another
// process, a virtual CPU the hypervisor has paused), and with equal shares the whole loop would wait for
// the slowest thread. Called while another thread's loop is running, it runs on the calling thread
// alone. A chunk must not call it again (no nesting).
void run_pieces(const char* label, int threads, int64_t count, ChunkRef chunk);

// chunk(begin, end) over [0, count), like Kokkos::parallel_for over Range(0, count) with the loop inside
// the body; `elements` is how many elements the whole loop reads or writes. The body must not throw:
// kernels check their inputs before the loop, and an exception escaping a piece ends the process
// (noexcept below) rather than unwinding while helpers still use the loop's state.
template <class Chunk>
void parallel_chunks(const char* label, int64_t count, int64_t elements, const Chunk& chunk) {
  const int threads = threads_for(count, elements);
  if (threads <= 1) {  // not worth waking a thread: run here
    if (count > 0) chunk(int64_t(0), count);
    return;
  }
  run_pieces(label, threads, count, ChunkRef{[](const void* self, int64_t begin, int64_t end) noexcept {
                                        (*static_cast<const Chunk*>(self))(begin, end);
                                      },
                                      &chunk});
}

// body(i) for i in [0, count), like Kokkos::parallel_for over Range(0, count).
template <class Body>
void parallel_for_split(const char* label, int64_t count, int64_t elements, Body body) {
  if (threads_for(count, elements) <= 1) {  // not worth waking a thread: run here
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  parallel_chunks(label, count, elements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

}  // namespace kestrel_cpu
