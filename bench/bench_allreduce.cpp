// All-reduce bus bandwidth through Kestrel's CPU backend (a ProcessGroup over the plugin ABI, the path
// the trainer's gradient buckets take) against raw in-place MPI_Allreduce of the same sizes, in
// alternating rounds on the same ranks. Run under mpirun; rank 0 prints one JSON line per size:
//
//   mpirun -np 2 build/bin/bench_allreduce [--rounds 7] [--iterations 20]
//
// busbw = algbw x 2 (N - 1) / N (nccl-tests' convention), from the median round.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kestrel/distributed.h"
#include "kestrel/engine.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7, iterations = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::max(1, std::atoi(argv[i + 1]));
  }
  kestrel::World& world = kestrel::World::get();
  world.require_mpi("cpu");
  kestrel::Device cpu = kestrel::Engine::global().device("cpu");
  kestrel::ProcessGroup group(cpu, world, 60);
  const double ranks = world.size(), bus = ranks > 1 ? 2 * (ranks - 1) / ranks : 1;
  for (int64_t bytes : {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20}) {
    const int64_t n = bytes / 4;
    kestrel::Tensor tensor = kestrel::Tensor::zeros({n}, kestrel::DType::f32, cpu);
    std::vector<float> raw(static_cast<size_t>(n), 0.0f);
    std::vector<double> mpi_times, kestrel_times;
    for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms both paths up
      MPI_Barrier(MPI_COMM_WORLD);
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i)
        MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double mpi = seconds_since(start) / iterations;
      MPI_Barrier(MPI_COMM_WORLD);
      start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) {
        group.all_reduce_sum(tensor);
        group.wait("bench_allreduce");
      }
      const double ours = seconds_since(start) / iterations;
      if (round == 0) continue;
      mpi_times.push_back(mpi);
      kestrel_times.push_back(ours);
    }
    const double mpi = median(mpi_times), ours = median(kestrel_times);
    if (world.is_root())
      std::printf("{\"bytes\": %lld, \"ranks\": %d, \"mpi_seconds\": %.9f, \"kestrel_seconds\": %.9f, "
                  "\"mpi_busbw_gbps\": %.4f, \"kestrel_busbw_gbps\": %.4f, \"fraction\": %.4f}\n",
                  static_cast<long long>(bytes), world.size(), mpi, ours, bytes * bus / mpi / 1e9,
                  bytes * bus / ours / 1e9, mpi / ours);
  }
  return 0;
}
