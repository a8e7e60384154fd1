// Host threads for large memory-bound loops while Kokkos has none. Kokkos spreads a parallel_for over
// its execution space's threads, but Debian's Kokkos is Serial-only. The optimizer updates use this: an
// update is a pass over parameters, gradients and both moments — tens of megabytes that no cache keeps
// between steps — and two cores draw more memory bandwidth than one. (Tried on the element-wise and
// window kernels of a ConvNet step as well: no gain there, so they stay on Kokkos alone.)
// Every chunk writes its own outputs, so results do not depend on the thread count.
#pragma once
#include <algorithm>
#include <thread>
#include <vector>

#include "cpu_common.hpp"

namespace kestrel_cpu {

// Below this many elements touched, starting a thread costs more than it saves.
constexpr int64_t kSplitMinimum = int64_t(1) << 18;

// 1 when Kokkos has threads of its own; otherwise KESTREL_CPU_UPDATE_THREADS, or every core.
int host_threads();
// Keeps a helper thread off the calling thread's core (cpu_parallel.cpp explains why).
void keep_off_this_core(std::thread& helper);

// Runs body(i) for i in [0, count) like Kokkos::parallel_for over Range(0, count); `elements` is how many
// elements the whole loop reads or writes. The body must not throw (it would end the process on a
// helper thread): kernels check their inputs before the loop.
template <class Body>
void parallel_for_split(const char* label, int64_t count, int64_t elements, Body body) {
  const int threads = elements >= kSplitMinimum ? int(std::min<int64_t>(host_threads(), count)) : 1;
  if (threads <= 1) {
    Kokkos::parallel_for(label, Range(0, count), body);
    return;
  }
  const int64_t chunk = (count + threads - 1) / threads;
  auto run_chunk = [=](int64_t first) {
    for (int64_t i = first; i < std::min(count, first + chunk); ++i) body(i);
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) {
    helpers.emplace_back(run_chunk, t * chunk);
    keep_off_this_core(helpers.back());
  }
  run_chunk(0);
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace kestrel_cpu
