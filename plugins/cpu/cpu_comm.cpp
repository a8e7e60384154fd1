// Collectives of the CPU plugin, over MPI (the launcher's processes: mpirun, srun).
//
// A communicator runs its collectives in issue order on a thread of its own, with MPI's blocking calls
// (the fastest path MPI has), so the host goes on computing backward while gradients travel. The stream a
// collective was issued on remembers it: whatever the stream does next waits for it first, which keeps
// the ABI's stream order. A watchdog thread gives each collective the communicator's timeout; when one
// runs over, it asks the other ranks where they are (on a communicator of its own, so it needs
// MPI_THREAD_MULTIPLE) and fails the communicator with PEER_FAILED naming the ranks that did not answer.
// MPI cannot cancel a blocked collective, so the host then aborts the job (comm_abort: MPI_Abort).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "cpu_comm.hpp"
#include "cpu_context.hpp"
#include "kestrel/plugin_shapes.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWhereTag = 7301;              // stall reports on the inspection communicator
constexpr double kAnswerSeconds = 0.5;       // how long a timed-out rank listens for the others' reports
constexpr double kDefaultTimeoutSeconds = 600;

struct Job {
  uint64_t ticket;
  std::string what;          // "all-reduce of 1048576 f32", for messages
  std::function<int()> run;  // the blocking MPI call; returns its error code
};

}  // namespace

struct kestrel_comm {
  MPI_Comm data = MPI_COMM_NULL;        // the collectives
  MPI_Comm inspection = MPI_COMM_NULL;  // stall reports, apart from the collectives in flight
  int rank = 0, size = 1;
  bool can_inspect = false;             // MPI gave MPI_THREAD_MULTIPLE

  std::mutex mutex;
  std::condition_variable changed;
  double timeout = kDefaultTimeoutSeconds;
  std::deque<Job> queue;
  uint64_t issued = 0, completed = 0;
  bool running = false;  // the worker is inside `current`
  Job current;
  Clock::time_point started;
  kestrel_status failed = KESTREL_STATUS_OK;
  std::string failure;
  bool stopping = false;
  std::thread worker, watchdog;
};

namespace kestrel_cpu {
namespace {

using kestrel::plugin_shapes::dtype_bytes;
using kestrel::plugin_shapes::numel;

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", s);
  return text;
}

MPI_Datatype mpi_type(kestrel_dtype dtype, bool summed) {
  switch (dtype) {
    case KESTREL_DTYPE_F32: return MPI_FLOAT;
    case KESTREL_DTYPE_F64: return MPI_DOUBLE;
    case KESTREL_DTYPE_I32: return MPI_INT32_T;
    case KESTREL_DTYPE_I64: return MPI_INT64_T;
    case KESTREL_DTYPE_U8: return MPI_UINT8_T;
    case KESTREL_DTYPE_F16:
    case KESTREL_DTYPE_BF16:
      // MPI has no 16-bit float sum; moving the bits is exact.
      if (summed) fail("MPI cannot sum f16 or bf16: reduce in f32", KESTREL_STATUS_UNSUPPORTED);
      return MPI_UINT16_T;
    default: fail("a collective's tensor has an unknown dtype");
  }
}

const char* dtype_text(kestrel_dtype dtype) {
  static const char* names[] = {"f32", "f16", "bf16", "i32", "i64", "u8", "f64"};
  return dtype >= 0 && dtype < KESTREL_DTYPE_COUNT ? names[dtype] : "?";
}

// The tensor's first element; the tensor must be contiguous and inside its buffer.
char* data_of(const kestrel_tensor* t, const char* role) {
  if (!t || !t->buffer) fail(std::string("collective: no ") + role + " tensor");
  if (!kestrel::plugin_shapes::valid_tensor(*t)) fail(std::string("collective: the ") + role + " tensor is malformed");
  if (!kestrel::plugin_shapes::is_contiguous(*t))
    fail(std::string("collective: the ") + role + " tensor must be contiguous", KESTREL_STATUS_UNSUPPORTED);
  const uint64_t end = (t->offset + uint64_t(numel(*t))) * dtype_bytes(t->dtype);
  if (end > t->buffer->bytes) fail(std::string("collective: the ") + role + " tensor reaches past its buffer");
  return static_cast<char*>(t->buffer->data) + t->offset * dtype_bytes(t->dtype);
}

int checked_count(int64_t n, const char* what) {
  if (n > INT_MAX) fail(std::string(what) + ": more than 2^31-1 elements per rank; split the tensor",
                        KESTREL_STATUS_UNSUPPORTED);
  return static_cast<int>(n);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

// Called with the comm's mutex held.
void fail_comm(kestrel_comm& comm, kestrel_status status, const std::string& message) {
  if (comm.failed != KESTREL_STATUS_OK) return;
  comm.failed = status;
  comm.failure = message;
  comm.changed.notify_all();
}

void worker_loop(kestrel_comm* comm) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  for (;;) {
    comm->changed.wait(lock, [&] { return comm->stopping || !comm->queue.empty(); });
    if (comm->queue.empty()) return;  // stopping with nothing left
    comm->current = std::move(comm->queue.front());
    comm->queue.pop_front();
    if (comm->failed != KESTREL_STATUS_OK) continue;  // a failed communicator runs nothing more
    comm->running = true;
    comm->started = Clock::now();
    lock.unlock();
    const int code = comm->current.run();
    lock.lock();
    comm->running = false;
    if (code != MPI_SUCCESS)
      fail_comm(*comm, KESTREL_STATUS_PEER_FAILED,
                "rank " + std::to_string(comm->rank) + ": " + comm->current.what + " failed in MPI: " +
                    mpi_error_text(code));
    comm->completed = comm->current.ticket;
    comm->changed.notify_all();
  }
}

// On a timeout: tells every other rank which collective this one waits in and listens kAnswerSeconds for
// theirs. Ranks that do not answer are stalled (or stuck before the collective); ranks that answer from
// another collective issued a different sequence.
std::string inspect(kestrel_comm& comm, uint64_t ticket) {
  if (!comm.can_inspect || comm.size == 1) return "";
  // Left to MPI when the job ends: a send to a stalled rank may never complete.
  auto* mine = new int64_t[2]{comm.rank, static_cast<int64_t>(ticket)};
  for (int r = 0; r < comm.size; ++r) {
    if (r == comm.rank) continue;
    MPI_Request request;
    MPI_Isend(mine, 2, MPI_INT64_T, r, kWhereTag, comm.inspection, &request);
    MPI_Request_free(&request);
  }
  std::map<int, int64_t> heard;
  const auto until = Clock::now() + std::chrono::duration<double>(kAnswerSeconds);
  while (Clock::now() < until && int(heard.size()) < comm.size - 1) {
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kWhereTag, comm.inspection, &arrived, &status);
    if (!arrived) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    int64_t theirs[2];
    MPI_Recv(theirs, 2, MPI_INT64_T, status.MPI_SOURCE, kWhereTag, comm.inspection, MPI_STATUS_IGNORE);
    heard[status.MPI_SOURCE] = theirs[1];
  }
  std::string silent, elsewhere;
  for (int r = 0; r < comm.size; ++r) {
    if (r == comm.rank) continue;
    auto found = heard.find(r);
    if (found == heard.end())
      silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    else if (found->second != static_cast<int64_t>(ticket))
      elsewhere += (elsewhere.empty() ? "" : ", ") + std::to_string(r) + " (in collective #" +
                   std::to_string(found->second) + ")";
  }
  std::string text;
  if (!silent.empty())
    text += "; rank " + silent + " did not join it and did not answer within " + seconds_text(kAnswerSeconds) +
            " (stalled, or stuck before this collective)";
  if (!elsewhere.empty()) text += "; rank " + elsewhere + " waits in another collective (the ranks issued different sequences)";
  if (text.empty()) text = "; every rank waits in it (the transport is stuck)";
  return text;
}

void watchdog_loop(kestrel_comm* comm) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  while (!comm->stopping) {
    comm->changed.wait_for(lock, std::chrono::milliseconds(50));
    if (!comm->running || comm->failed != KESTREL_STATUS_OK) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - comm->started).count();
    if (waited < comm->timeout) continue;
    const uint64_t ticket = comm->current.ticket;
    const std::string what = comm->current.what;
    const double timeout = comm->timeout;
    lock.unlock();
    const std::string where = inspect(*comm, ticket);
    lock.lock();
    fail_comm(*comm, KESTREL_STATUS_PEER_FAILED,
              "collective #" + std::to_string(ticket) + " (" + what + ") on rank " + std::to_string(comm->rank) +
                  " of " + std::to_string(comm->size) + " did not complete within " + seconds_text(timeout) +
                  " (the communicator's timeout)" + where);
  }
}

// Queues a collective on the comm's thread and makes `stream` wait for it.
void issue(kestrel_comm* comm, kestrel_stream* stream, std::string what, std::function<int()> run) {
  if (stream->recording) fail("collectives cannot be captured on the cpu backend", KESTREL_STATUS_UNSUPPORTED);
  if (stream->comm && stream->comm != comm) wait_for_collectives(stream);  // order across communicators
  std::lock_guard<std::mutex> lock(comm->mutex);
  if (comm->failed != KESTREL_STATUS_OK) fail(comm->failure, comm->failed);
  const uint64_t ticket = ++comm->issued;
  comm->queue.push_back({ticket, std::move(what), std::move(run)});
  comm->changed.notify_all();
  stream->comm = comm;
  stream->comm_ticket = ticket;
}

std::string describe(const char* op, int64_t count, kestrel_dtype dtype) {
  return std::string(op) + " of " + std::to_string(count) + " " + dtype_text(dtype);
}

}  // namespace

void wait_for_collectives(kestrel_stream* stream) {
  kestrel_comm* comm = stream->comm;
  if (!comm) return;
  std::unique_lock<std::mutex> lock(comm->mutex);
  comm->changed.wait(lock, [&] { return comm->completed >= stream->comm_ticket || comm->failed != KESTREL_STATUS_OK; });
  if (comm->completed < stream->comm_ticket) fail(comm->failure, comm->failed);
  stream->comm = nullptr;
}

kestrel_status comm_unique_id(char* id, size_t id_size) {
  return Boundary::guarded([&] {
    // MPI's world is the group: there is nothing to share, but the host shares whatever this says.
    if (!id || id_size < 4) fail("comm_unique_id: the id buffer needs 4 bytes");
    std::memcpy(id, "mpi", 4);
  });
}

kestrel_status comm_create(kestrel_context*, const char*, int32_t rank, int32_t world_size, kestrel_comm** out) {
  return Boundary::guarded([&] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised)
      fail("the cpu backend's collectives run over MPI, which is not initialised: the host initialises it "
           "(Kestrel's engine does) before creating a communicator",
           KESTREL_STATUS_UNAVAILABLE);
    int mpi_rank = 0, mpi_size = 1, threads = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    MPI_Query_thread(&threads);
    if (rank != mpi_rank || world_size != mpi_size)
      fail("comm_create: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
           " asked for, but MPI started this process as rank " + std::to_string(mpi_rank) + " of " +
           std::to_string(mpi_size) + "; the cpu backend's group is MPI's world");
    if (threads < MPI_THREAD_SERIALIZED)
      fail("the cpu backend's collectives run on a thread of their own, which needs MPI initialised with at least "
           "MPI_THREAD_SERIALIZED",
           KESTREL_STATUS_UNAVAILABLE);
    auto comm = std::make_unique<kestrel_comm>();
    comm->rank = rank;
    comm->size = world_size;
    comm->can_inspect = threads == MPI_THREAD_MULTIPLE;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm->data);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm->inspection);
    MPI_Comm_set_errhandler(comm->data, MPI_ERRORS_RETURN);
    comm->worker = std::thread(worker_loop, comm.get());
    comm->watchdog = std::thread(watchdog_loop, comm.get());
    *out = comm.release();
  });
}

void comm_destroy(kestrel_comm* comm) {
  if (!comm) return;
  bool stuck;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    comm->stopping = true;
    stuck = comm->running;  // only after a failure: a healthy communicator finishes its queue first
    comm->changed.notify_all();
  }
  if (stuck) {
    // The worker is blocked in MPI for good (the host did not abort): it cannot be joined or freed.
    comm->worker.detach();
    comm->watchdog.detach();
    return;
  }
  comm->worker.join();
  comm->watchdog.join();
  MPI_Comm_free(&comm->data);
  MPI_Comm_free(&comm->inspection);
  delete comm;
}

kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor) {
  return Boundary::guarded([&] {
    char* data = data_of(tensor, "all-reduce");
    const MPI_Datatype type = mpi_type(tensor->dtype, true);
    const int64_t count = numel(*tensor);
    const size_t bytes = dtype_bytes(tensor->dtype);
    MPI_Comm group = comm->data;
    issue(comm, stream, describe("all-reduce", count, tensor->dtype), [=] {
      // In pieces MPI's int count can hold.
      for (int64_t done = 0; done < count;) {
        const int piece = static_cast<int>(std::min<int64_t>(count - done, int64_t{1} << 30));
        const int code = MPI_Allreduce(MPI_IN_PLACE, data + done * bytes, piece, type, MPI_SUM, group);
        if (code != MPI_SUCCESS) return code;
        done += piece;
      }
      return MPI_SUCCESS;
    });
  });
}

kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor, int32_t root) {
  return Boundary::guarded([&] {
    char* data = data_of(tensor, "broadcast");
    if (root < 0 || root >= comm->size)
      fail("broadcast: root " + std::to_string(root) + " is not a rank of the " + std::to_string(comm->size));
    const MPI_Datatype type = mpi_type(tensor->dtype, false);
    const int64_t count = numel(*tensor);
    const size_t bytes = dtype_bytes(tensor->dtype);
    MPI_Comm group = comm->data;
    issue(comm, stream, describe("broadcast", count, tensor->dtype), [=] {
      for (int64_t done = 0; done < count;) {
        const int piece = static_cast<int>(std::min<int64_t>(count - done, int64_t{1} << 30));
        const int code = MPI_Bcast(data + done * bytes, piece, type, root, group);
        if (code != MPI_SUCCESS) return code;
        done += piece;
      }
      return MPI_SUCCESS;
    });
  });
}

kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                  const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    char* in = data_of(input, "reduce-scatter input");
    char* out = data_of(output, "reduce-scatter output");
    if (input->dtype != output->dtype) fail("reduce-scatter: input and output dtypes differ");
    const int64_t n = numel(*output);
    if (numel(*input) != n * comm->size)
      fail("reduce-scatter: the input has " + std::to_string(numel(*input)) + " elements, not world size (" +
           std::to_string(comm->size) + ") x the output's " + std::to_string(n));
    const int count = checked_count(n, "reduce-scatter");
    const MPI_Datatype type = mpi_type(input->dtype, true);
    MPI_Comm group = comm->data;
    issue(comm, stream, describe("reduce-scatter", n * comm->size, input->dtype),
          [=] { return MPI_Reduce_scatter_block(in, out, count, type, MPI_SUM, group); });
  });
}

kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                          const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    char* in = data_of(input, "all-gather input");
    char* out = data_of(output, "all-gather output");
    if (input->dtype != output->dtype) fail("all-gather: input and output dtypes differ");
    const int64_t n = numel(*input);
    if (numel(*output) != n * comm->size)
      fail("all-gather: the output has " + std::to_string(numel(*output)) + " elements, not world size (" +
           std::to_string(comm->size) + ") x the input's " + std::to_string(n));
    const int count = checked_count(n, "all-gather");
    const MPI_Datatype type = mpi_type(input->dtype, false);
    MPI_Comm group = comm->data;
    issue(comm, stream, describe("all-gather", n * comm->size, input->dtype),
          [=] { return MPI_Allgather(in, count, type, out, count, type, group); });
  });
}

kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds) {
  return Boundary::guarded([&] {
    if (!(seconds > 0)) fail("comm_set_timeout: the timeout must be a positive number of seconds");
    std::lock_guard<std::mutex> lock(comm->mutex);
    comm->timeout = seconds;
  });
}

kestrel_status comm_query(kestrel_comm* comm) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  if (comm->failed != KESTREL_STATUS_OK) Boundary::message() = comm->failure;
  return comm->failed;
}

void comm_abort(kestrel_comm*, int32_t exit_code) {
  // MPI cannot cancel a collective a rank is blocked in: ending the job is the only way no rank waits.
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace kestrel_cpu
