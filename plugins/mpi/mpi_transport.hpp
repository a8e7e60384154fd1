// Collectives over MPI on host memory, for plugins whose ranks are the launcher's processes (mpirun,
// srun): the CPU plugin hands it its buffers, the Vulkan plugin host copies of its buffers. One
// Transport per communicator runs its collectives in issue order on a thread of its own, with MPI's
// blocking calls (the fastest path MPI has), so the caller goes on working while they travel. A
// watchdog gives each collective the timeout; when one runs over, it asks the other ranks where they
// are (on an MPI communicator of its own, so it needs MPI_THREAD_MULTIPLE) and fails the transport with
// PEER_FAILED naming the ranks that did not answer. MPI cannot cancel a blocked collective, so the host
// then ends the job (abort: MPI_Abort).
//
// Errors are thrown as kestrel::plugin_errors::Failure, for the plugin's entry points to report.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kestrel/plugin.h"

namespace kestrel::mpi_transport {

class Transport {
 public:
  // rank and world_size must be MPI's (the group is MPI's world); MPI must be initialised by the host
  // with at least MPI_THREAD_SERIALIZED. `backend` names the plugin in messages.
  Transport(const char* backend, int32_t rank, int32_t world_size);
  // Waits for the queued collectives, each within the timeout once ready. After a failure (a timeout included) a
  // collective may block in MPI for good: then the threads are left to the process's end (the host aborts
  // the job). Should the host finalise MPI instead, MPI_Finalize first waits up to the timeout for that
  // collective to complete, and ends the job if it does not.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // What a collective's memory must wait for before MPI may read it (a device still writing it), run
  // on the transport's thread just before the collective and outside its timeout (a wait that never
  // ends is not a stalled peer, and is not reported as one). Throws Failure when the wait fails: the
  // transport then fails with that status and message.
  using Ready = std::function<void()>;

  // Each queues a collective and returns its ticket, 1, 2, ... in issue order. The memory is the
  // caller's and must stay valid, and unread and unwritten by anyone else, until wait(ticket) returns.
  // data: count elements, summed in place over the ranks.
  uint64_t all_reduce_sum(void* data, int64_t count, kestrel_dtype dtype, Ready ready = {});
  // data: count elements, root's everywhere.
  uint64_t broadcast(void* data, int64_t count, kestrel_dtype dtype, int32_t root, Ready ready = {});
  // input: world_size * n elements; output: n, this rank's block of the sum.
  uint64_t reduce_scatter_sum(const void* input, void* output, int64_t n, kestrel_dtype dtype, Ready ready = {});
  // input: n elements; output: world_size * n, block r being rank r's input.
  uint64_t all_gather(const void* input, void* output, int64_t n, kestrel_dtype dtype, Ready ready = {});

  // Blocks until collective `ticket` has completed; throws Failure (PEER_FAILED, or a failed Ready's
  // status) when the transport failed first.
  void wait(uint64_t ticket);
  // Throws the failure (PEER_FAILED) once the transport has failed: a failed transport runs nothing more,
  // and its worker may still be inside MPI with the memory of the collective that failed.
  void check();
  void set_timeout(double seconds);
  // OK while it works, else the status it failed with and the message in `message`. Non-blocking.
  kestrel_status query(std::string& message);
  // comm_unique_id's answer: MPI's world is the group, so there is nothing to share, but the host shares
  // whatever this writes (4 bytes).
  static void unique_id(char* id, size_t id_size);
  // Ends the whole job: the only way no rank waits in a collective MPI cannot cancel.
  [[noreturn]] static void abort(int32_t exit_code);

  int32_t rank() const;
  int32_t size() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  // Queues `run` (the blocking MPI call, returning its error code) under the name `what`, after `ready`.
  uint64_t issue(std::string what, std::function<int()> run, Ready ready);
};

}  // namespace kestrel::mpi_transport
