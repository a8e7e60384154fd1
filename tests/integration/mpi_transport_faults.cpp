// The MPI transport (plugins/mpi) when a collective goes wrong, on two ranks under mpirun:
//  1. MPI itself fails inside a collective (a broadcast whose receiver expects fewer elements than the
//     root sends: MPI_ERR_TRUNCATE): the receiver's wait throws PEER_FAILED with MPI's words, and the
//     failed transport refuses further collectives.
//  2. A transport destroyed while a collective it queued waits for a rank that never joins: the destructor
//     returns once the timeout fails the collective (it used to join a worker blocked in MPI for good).
//     Rank 1 then joins that collective, so the worker left behind completes, and rank 0 calls
//     MPI_Finalize at once: MPI_Finalize waits for the worker to leave MPI (it crashed at exit about one
//     run in six when it did not), so the late sum is there after it.
//  3. (argument `finalize_while_stuck`) The same, but rank 1 never joins: rank 0's MPI_Finalize waits the
//     timeout, then ends the job with a message saying why (the test looks for it).
// Prints one "ok: ..." line per check and exits 0; anything else is a failure.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../../plugins/mpi/mpi_transport.hpp"
#include "kestrel/plugin_errors.hpp"

namespace {

using kestrel::mpi_transport::Transport;
using Failure = kestrel::plugin_errors::Failure;

[[noreturn]] void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

// Scenario 1: rank 0 broadcasts 256 floats, rank 1 takes 8.
void truncated_broadcast(int rank) {
  Transport transport("cpu", rank, 2);
  std::vector<float> data(256, 1.0f);
  const uint64_t ticket = transport.broadcast(data.data(), rank == 0 ? 256 : 8, KESTREL_DTYPE_F32, 0);
  try {
    transport.wait(ticket);
    if (rank == 1) fail(rank, "a truncated broadcast completed");
  } catch (const Failure& e) {
    const std::string message = e.what();
    if (rank == 0) fail(rank, "the root's broadcast failed: " + message);
    if (e.status != KESTREL_STATUS_PEER_FAILED || message.find("failed in MPI") == std::string::npos)
      fail(rank, "unexpected failure: " + message);
    try {
      transport.all_reduce_sum(data.data(), 1, KESTREL_DTYPE_F32);
      fail(rank, "a failed transport queued another collective");
    } catch (const Failure&) {
    }
    std::printf("ok: rank 1's truncated broadcast failed with: %s\n", message.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Scenario 2: rank 0 queues an all-reduce that rank 1 joins only after rank 0's transport is destroyed.
// Rank 0's detached worker writes the late sum here after destroyed_while_waiting has returned.
float late_sum;

void destroyed_while_waiting(int rank) {
  constexpr double kTimeout = 1.0;
  float& value = late_sum;
  value = float(rank + 1);
  if (rank == 0) {
    auto transport = std::make_unique<Transport>("cpu", rank, 2);
    transport->set_timeout(kTimeout);
    transport->all_reduce_sum(&value, 1, KESTREL_DTYPE_F32);
    const auto start = std::chrono::steady_clock::now();
    transport.reset();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The timeout, then half a second listening for the other ranks' reports, then the detach.
    if (seconds < kTimeout || seconds > kTimeout + 3) fail(rank, "the destructor took " + std::to_string(seconds) + " s");
    std::printf("ok: rank 0's transport was destroyed %.2f s after its all-reduce was queued (timeout %.1f s)\n",
                seconds, kTimeout);
    std::fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    Transport transport("cpu", rank, 2);
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0's destructor has returned
    transport.wait(transport.all_reduce_sum(&value, 1, KESTREL_DTYPE_F32));  // releases rank 0's worker
    if (value != 3.0f) fail(rank, "the late all-reduce gave " + std::to_string(value));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's worker may still be inside MPI: MPI_Finalize waits for it
}

// Scenario 3: rank 0's transport is destroyed with an all-reduce rank 1 never joins, then MPI finalises.
void finalize_while_stuck(int rank) {
  static float value = 1.0f;
  auto transport = std::make_unique<Transport>("cpu", rank, 2);  // on both ranks: its creation is collective
  if (rank == 0) {
    transport->set_timeout(1.0);
    transport->all_reduce_sum(&value, 1, KESTREL_DTYPE_F32);
  }
  transport.reset();
  if (rank == 0) std::printf("rank 0 finalises with its all-reduce still in MPI\n");
  std::fflush(stdout);
  MPI_Finalize();  // rank 0: ends the job after the timeout; rank 1 is ended with it
  std::printf("FAILED: rank %d's MPI_Finalize returned\n", rank);
  std::fflush(stdout);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, size = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || provided != MPI_THREAD_MULTIPLE) fail(rank, "run on 2 ranks of an MPI with MPI_THREAD_MULTIPLE");
  try {
    if (argc > 1 && std::string(argv[1]) == "finalize_while_stuck") finalize_while_stuck(rank);
    truncated_broadcast(rank);
    destroyed_while_waiting(rank);
  } catch (const Failure& e) {
    fail(rank, e.what());
  }
  MPI_Finalize();
  if (rank == 0) {
    const float late = late_sum;  // MPI_Finalize has waited for the worker
    if (late != 3.0f) {
      std::printf("FAILED: rank 0's detached all-reduce had not completed when MPI_Finalize returned (%g)\n", late);
      return 1;
    }
    std::printf("ok: MPI_Finalize waited for rank 0's detached all-reduce (sum %g)\n", late);
  }
  return 0;
}
