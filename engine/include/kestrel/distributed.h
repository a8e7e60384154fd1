// Data parallelism: the processes of a run (World) and collectives over them on a device (ProcessGroup).
//
// One process per device: `mpirun -np 4 kestrel train run.json` (or srun under Slurm) starts the ranks;
// each reads its rank from MPI. The collectives themselves belong to the backend (the CPU plugin's over
// MPI; NCCL for CUDA), reached through the plugin ABI's collective entries.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/device.h"
#include "kestrel/error.h"
#include "kestrel/tensor.h"

namespace kestrel {

// Another rank failed, left, or missed the timeout of a collective: the message names the ranks, the
// collective and, from the trainer, the step. The run cannot go on; every rank ends.
class PeerFailed : public BackendError {
 public:
  using BackendError::BackendError;
};

class LocalRendezvous;

// The processes a launcher started for this run; a world of one without a launcher. Or the ranks of
// one process driving several devices, a thread each (in_process).
class World {
 public:
  // This process's world. Under a launcher (mpirun, srun: read from their environment variables) the
  // first call initialises MPI, which is finalised at exit; otherwise the world has one process.
  static World& get();
  // `devices` ranks inside this process, one per device, each to be driven by a thread of its own: their
  // host exchanges and collectives meet in the process. Not under a launcher (one process per machine
  // then takes one device).
  static std::vector<World> in_process(int devices);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks on this machine: the device to take
  int local_size() const { return local_size_; }
  bool is_root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }
  // "mpirun" or "srun" (with its process count), "threads (N devices)", or "" for a single process: for
  // messages.
  const std::string& launcher() const { return launcher_; }
  // Ranks of one process: where their exchanges meet (null for processes).
  LocalRendezvous* rendezvous() const { return local_.get(); }

  // Makes sure MPI is initialised, also in a world of one (MPI's singleton), as backends' collectives
  // over MPI need. Throws Unsupported, naming `backend`, when this build has no MPI.
  void require_mpi(const std::string& backend);
  // Small host exchanges for setting a run up (configurations, parameter signatures): every rank's text,
  // in rank order.
  std::vector<std::string> all_gather(const std::string& mine);
  // Ends every process of the run with `exit_code` (MPI_Abort) after this one has said why; a single
  // process just exits.
  [[noreturn]] void abort(int exit_code);

 private:
  World();
  World(int rank, int size, std::shared_ptr<LocalRendezvous> local);
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string launcher_;
  bool mpi_ = false;  // this process initialised MPI (and finalises it at exit)
  std::shared_ptr<LocalRendezvous> local_;
};

// A communicator over the world's processes on one device, with its own stream: collectives run beside
// the device's computation, and wait() joins them. Over the ranks of one process (World::in_process) the
// collectives meet on the host instead: each copies this rank's tensor to host memory, combines every
// rank's in rank order, and copies the result back before it returns (any backend; no overlap with the
// device's work).
class ProcessGroup {
 public:
  // timeout_seconds: how long one collective may wait for the other ranks before the group fails.
  ProcessGroup(const Device& device, World& world, double timeout_seconds);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Device& device() const { return device_; }
  // Whether `device`'s backend offers collectives.
  static bool supported(const Device& device);

  // Each is queued after the work the device has been given so far, and runs while the caller goes on;
  // the tensors are kept alive until wait(). All contiguous, on the group's device. `label` names the
  // collective in a failure's message ("gradient bucket 2 of 5").
  void all_reduce_sum(const Tensor& tensor, const std::string& label = "");   // in place, any shape
  void broadcast(const Tensor& tensor, int root, const std::string& label = "");  // in place, any shape
  // input: (size * n); output: (n)
  void reduce_scatter_sum(const Tensor& input, const Tensor& output, const std::string& label = "");
  // input: (n); output: (size * n)
  void all_gather(const Tensor& input, const Tensor& output, const std::string& label = "");
  // Waits for every collective queued so far. On a failure throws PeerFailed whose message starts with
  // `context` (say, "step 12"), names the ranks the backend found missing, and the labels of the
  // collectives that were in flight, numbered as the backend numbers them.
  void wait(const std::string& context);
  // Ends the group's collectives on every rank (with MPI: the whole job, with `exit_code`; the ranks of
  // one process: their waits, and this call throws PeerFailed).
  [[noreturn]] void abort(int exit_code);

 private:
  kestrel_stream* ordered_after_device();  // the group's stream, made to wait for the device's stream
  void check(kestrel_status status, const std::string& what);
  void issued(std::string label, std::initializer_list<Tensor> tensors);
  // In-process ranks: one round of the rendezvous on `tensor`'s bytes; `read` sees every rank's in place
  // (checked to be the same size) before this rank departs.
  void exchanged(const Tensor& tensor, const std::string& what,
                 const std::function<void(const std::vector<std::vector<char>>&)>& read);

  Device device_;
  int rank_, size_;
  LocalRendezvous* local_ = nullptr;  // in-process ranks: where the collectives meet
  double timeout_seconds_;
  kestrel_comm* comm_ = nullptr;
  kestrel_stream* stream_ = nullptr;
  kestrel_event* computed_ = nullptr;  // recorded on the device's stream before each collective
  std::vector<Tensor> in_flight_;      // what the queued collectives read and write
  uint64_t issued_ = 0;                // collectives so far: the backend numbers them from 1 alike
  std::vector<std::string> labels_;    // of those in flight, "#13 gradient bucket 2 of 5"
};

}  // namespace kestrel
