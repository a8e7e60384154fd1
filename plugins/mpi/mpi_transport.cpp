// The MPI transport of the CPU and Vulkan plugins' collectives (see mpi_transport.hpp).
#include "mpi_transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "kestrel/plugin_errors.hpp"

namespace kestrel::mpi_transport {

namespace {

using Clock = std::chrono::steady_clock;
using plugin_errors::fail;
constexpr int kWhereTag = 7301;         // stall reports on the inspection communicator
constexpr double kAnswerSeconds = 0.5;  // how long a timed-out rank listens for the others' reports
constexpr double kDefaultTimeoutSeconds = 600;
constexpr int64_t kPiece = int64_t{1} << 30;  // elements per MPI call: its counts are ints

struct Job {
  uint64_t ticket;
  std::string what;          // "all-reduce of 1048576 f32", for messages
  std::function<int()> run;  // the blocking MPI call; returns its error code
  Transport::Ready ready;    // what the memory waits for first; may be empty
};

// Runs the job's `ready` and lets go of it (and of what it holds, such as a device's fences); "" when it
// succeeded, else why not, with the status to fail the transport with.
std::string make_ready(Job& job, kestrel_status& status) {
  if (!job.ready) return "";
  try {
    Transport::Ready ready = std::move(job.ready);
    job.ready = nullptr;
    ready();
    return "";
  } catch (const plugin_errors::Failure& f) {
    status = f.status;
    return f.what();
  } catch (const std::exception& e) {
    status = KESTREL_STATUS_INTERNAL;
    return e.what();
  }
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", s);
  return text;
}

const char* dtype_text(kestrel_dtype dtype) {
  static const char* names[] = {"f32", "f16", "bf16", "i32", "i64", "u8", "f64"};
  return dtype >= 0 && dtype < KESTREL_DTYPE_COUNT ? names[dtype] : "?";
}

std::string describe(const char* op, int64_t count, kestrel_dtype dtype) {
  return std::string(op) + " of " + std::to_string(count) + " " + dtype_text(dtype);
}

// The MPI type moving `dtype`, and its width in bytes.
std::pair<MPI_Datatype, size_t> mpi_type(kestrel_dtype dtype, bool summed) {
  switch (dtype) {
    case KESTREL_DTYPE_F32: return {MPI_FLOAT, 4};
    case KESTREL_DTYPE_F64: return {MPI_DOUBLE, 8};
    case KESTREL_DTYPE_I32: return {MPI_INT32_T, 4};
    case KESTREL_DTYPE_I64: return {MPI_INT64_T, 8};
    case KESTREL_DTYPE_U8: return {MPI_UINT8_T, 1};
    case KESTREL_DTYPE_F16:
    case KESTREL_DTYPE_BF16:
      // MPI has no 16-bit float sum; moving the bits is exact.
      if (summed) fail("MPI cannot sum f16 or bf16: reduce in f32", KESTREL_STATUS_UNSUPPORTED);
      return {MPI_UINT16_T, 2};
    default: fail("a collective's tensor has an unknown dtype");
  }
}

// Runs `call(first element, count)` over `count` elements of `width` bytes at `data`, in pieces MPI's int
// counts can hold; returns the first error code, or MPI_SUCCESS.
template <class Call>
int in_pieces(void* data, int64_t count, size_t width, Call call) {
  for (int64_t done = 0; done < count;) {
    const int piece = static_cast<int>(std::min(count - done, kPiece));
    const int code = call(static_cast<char*>(data) + done * width, piece);
    if (code != MPI_SUCCESS) return code;
    done += piece;
  }
  return MPI_SUCCESS;
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

}  // namespace

struct Transport::State {
  MPI_Comm data = MPI_COMM_NULL;        // the collectives
  MPI_Comm inspection = MPI_COMM_NULL;  // stall reports, apart from the collectives in flight
  int rank = 0, size = 1;
  bool can_inspect = false;             // MPI gave MPI_THREAD_MULTIPLE

  std::mutex mutex;
  std::condition_variable changed;
  double timeout = kDefaultTimeoutSeconds;
  std::deque<Job> queue;
  uint64_t issued = 0, completed = 0;
  bool running = false;    // the worker is inside `current`
  bool preparing = false;  // ... in its `ready`, not yet in MPI
  Job current;
  Clock::time_point started;
  kestrel_status failed = KESTREL_STATUS_OK;
  std::string failure;
  uint64_t failed_ticket = 0;  // the collective that failed: it and every later one fail their waits
  bool stopping = false;
  std::thread worker, watchdog;

  // Called with the mutex held.
  void fail_with(kestrel_status status, const std::string& message, uint64_t ticket) {
    if (failed != KESTREL_STATUS_OK) return;
    failed = status;
    failure = message;
    failed_ticket = ticket;
    changed.notify_all();
  }
  void work();
  void watch();
  std::string inspect(uint64_t ticket);
  void wait_before_finalize();
};

void Transport::State::work() {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    changed.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;  // stopping with nothing left
    current = std::move(queue.front());
    queue.pop_front();
    if (failed != KESTREL_STATUS_OK) continue;  // a failed transport runs nothing more
    running = true;
    preparing = true;  // outside the timeout: the memory's writer (a device) is not a peer
    lock.unlock();
    kestrel_status status = KESTREL_STATUS_OK;
    const std::string unready = make_ready(current, status);
    lock.lock();
    preparing = false;
    if (!unready.empty()) {
      running = false;
      fail_with(status, "rank " + std::to_string(rank) + ": " + current.what + " could not start: " + unready,
                current.ticket);
      completed = current.ticket;
      changed.notify_all();
      continue;
    }
    if (failed != KESTREL_STATUS_OK) {  // meanwhile (the watchdog, on an earlier collective): run nothing more
      running = false;
      changed.notify_all();
      continue;
    }
    started = Clock::now();
    lock.unlock();
    const int code = current.run();
    lock.lock();
    running = false;
    if (code != MPI_SUCCESS)
      fail_with(KESTREL_STATUS_PEER_FAILED,
                "rank " + std::to_string(rank) + ": " + current.what + " failed in MPI: " + mpi_error_text(code),
                current.ticket);
    completed = current.ticket;
    changed.notify_all();
  }
}

// On a timeout: tells every other rank which collective this one waits in and listens kAnswerSeconds for
// theirs. Ranks that do not answer are stalled (or stuck before the collective); ranks that answer from
// another collective issued a different sequence.
std::string Transport::State::inspect(uint64_t ticket) {
  if (!can_inspect || size == 1) return "";
  // Left to MPI when the job ends: a send to a stalled rank may never complete.
  auto* mine = new int64_t[2]{rank, static_cast<int64_t>(ticket)};
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    MPI_Request request;
    MPI_Isend(mine, 2, MPI_INT64_T, r, kWhereTag, inspection, &request);
    MPI_Request_free(&request);
  }
  std::map<int, int64_t> heard;
  const auto until = Clock::now() + std::chrono::duration<double>(kAnswerSeconds);
  while (Clock::now() < until && int(heard.size()) < size - 1) {
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kWhereTag, inspection, &arrived, &status);
    if (!arrived) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    int64_t theirs[2];
    MPI_Recv(theirs, 2, MPI_INT64_T, status.MPI_SOURCE, kWhereTag, inspection, MPI_STATUS_IGNORE);
    heard[status.MPI_SOURCE] = theirs[1];
  }
  std::string silent, elsewhere;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
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

void Transport::State::watch() {
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    changed.wait_for(lock, std::chrono::milliseconds(50));
    if (!running || preparing || failed != KESTREL_STATUS_OK) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - started).count();
    if (waited < timeout) continue;
    const uint64_t ticket = current.ticket;
    const std::string what = current.what;
    const double limit = timeout;
    lock.unlock();
    const std::string where = inspect(ticket);
    lock.lock();
    if (!running || preparing || current.ticket != ticket) continue;  // it completed while the ranks answered
    fail_with(KESTREL_STATUS_PEER_FAILED,
              "collective #" + std::to_string(ticket) + " (" + what + ") on rank " + std::to_string(rank) + " of " +
                  std::to_string(size) + " did not complete within " + seconds_text(limit) +
                  " (the communicator's timeout)" + where,
              ticket);
  }
}

// MPI_Finalize must not run while another thread is inside a collective: OpenMPI tears the communicator
// down under it (a crash at exit). MPI_Finalize first deletes MPI_COMM_SELF's attributes (the MPI
// standard's hook for "user functions at process termination"), so a transport destroyed with its worker
// blocked leaves an attribute there whose delete callback runs this: it waits up to the timeout for the
// worker to leave MPI (the late collective may yet complete: a slow rank joins it after all) and
// otherwise ends the job, which the host should have done on the failure (MPI cannot cancel the call).
void Transport::State::wait_before_finalize() {
  std::unique_lock<std::mutex> lock(mutex);
  if (changed.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return !running; })) return;
  std::fprintf(stderr,
               "kestrel: MPI_Finalize was called on rank %d while its collective #%llu (%s) has not finished "
               "after the transport failed (%s); MPI cannot finalise with a collective in flight, so the job ends "
               "(MPI_Abort). After a collective fails, end the job (the communicator's abort) instead.\n",
               rank, static_cast<unsigned long long>(current.ticket), current.what.c_str(), failure.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

Transport::Transport(const char* backend, int32_t rank, int32_t world_size) : state_(std::make_unique<State>()) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    fail(std::string("the ") + backend + " backend's collectives run over MPI, which is not initialised: the host "
             "initialises it (Kestrel's engine does) before creating a communicator",
         KESTREL_STATUS_UNAVAILABLE);
  int mpi_rank = 0, mpi_size = 1, threads = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  MPI_Query_thread(&threads);
  if (rank != mpi_rank || world_size != mpi_size)
    fail("comm_create: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
         " asked for, but MPI started this process as rank " + std::to_string(mpi_rank) + " of " +
         std::to_string(mpi_size) + "; the " + backend + " backend's group is MPI's world");
  if (threads < MPI_THREAD_SERIALIZED)
    fail(std::string("the ") + backend + " backend's collectives run on a thread of their own, which needs MPI "
             "initialised with at least MPI_THREAD_SERIALIZED",
         KESTREL_STATUS_UNAVAILABLE);
  State& s = *state_;
  s.rank = rank;
  s.size = world_size;
  s.can_inspect = threads == MPI_THREAD_MULTIPLE;
  MPI_Comm_dup(MPI_COMM_WORLD, &s.data);
  MPI_Comm_dup(MPI_COMM_WORLD, &s.inspection);
  MPI_Comm_set_errhandler(s.data, MPI_ERRORS_RETURN);
  s.worker = std::thread([&s] { s.work(); });
  s.watchdog = std::thread([&s] { s.watch(); });
}

Transport::~Transport() {
  State& s = *state_;
  bool stuck;
  {
    // The queued collectives finish first, under the watchdog: one whose peer never joins fails at the
    // timeout instead of keeping this wait (and the worker's join) blocked for good.
    std::unique_lock<std::mutex> lock(s.mutex);
    s.changed.wait(lock, [&] { return (s.queue.empty() && !s.running) || s.failed != KESTREL_STATUS_OK; });
    s.stopping = true;
    stuck = s.running;  // only after a failure
    s.changed.notify_all();
  }
  if (stuck) {
    // The worker is blocked in MPI (the host did not abort): it can be neither joined nor freed. Should the
    // collective complete after all, the worker skips the rest of the queue and ends; MPI_Finalize waits
    // for that (wait_before_finalize). Registering the wait is an MPI call beside the worker's, which only
    // MPI_THREAD_MULTIPLE allows; with less, the host may not finalise with a thread in MPI either.
    // The collectives it will skip go now, on this thread: their `ready`s may hold a device's fences,
    // which must not outlive the device.
    std::deque<Job> skipped;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      skipped.swap(s.queue);
    }
    s.worker.detach();
    s.watchdog.detach();
    if (s.can_inspect) {
      const auto wait = [](MPI_Comm, int, void* state, void*) {
        static_cast<State*>(state)->wait_before_finalize();
        return MPI_SUCCESS;
      };
      int key = MPI_KEYVAL_INVALID;
      if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, wait, &key, nullptr) == MPI_SUCCESS)
        MPI_Comm_set_attr(MPI_COMM_SELF, key, &s);
    }
    (void)state_.release();
    return;
  }
  s.worker.join();
  s.watchdog.join();
  MPI_Comm_free(&s.data);
  MPI_Comm_free(&s.inspection);
}

uint64_t Transport::issue(std::string what, std::function<int()> run, Ready ready) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->failed != KESTREL_STATUS_OK) fail(state_->failure, state_->failed);
  const uint64_t ticket = ++state_->issued;
  state_->queue.push_back({ticket, std::move(what), std::move(run), std::move(ready)});
  state_->changed.notify_all();
  return ticket;
}

uint64_t Transport::all_reduce_sum(void* data, int64_t count, kestrel_dtype dtype, Ready ready) {
  const auto type = mpi_type(dtype, true);
  MPI_Comm group = state_->data;
  return issue(describe("all-reduce", count, dtype), [=] {
    return in_pieces(data, count, type.second, [&](char* piece, int n) {
      return MPI_Allreduce(MPI_IN_PLACE, piece, n, type.first, MPI_SUM, group);
    });
  }, std::move(ready));
}

uint64_t Transport::broadcast(void* data, int64_t count, kestrel_dtype dtype, int32_t root, Ready ready) {
  if (root < 0 || root >= state_->size)
    fail("broadcast: root " + std::to_string(root) + " is not one of the " + std::to_string(state_->size) + " ranks");
  const auto type = mpi_type(dtype, false);
  MPI_Comm group = state_->data;
  return issue(describe("broadcast", count, dtype), [=] {
    return in_pieces(data, count, type.second,
                     [&](char* piece, int n) { return MPI_Bcast(piece, n, type.first, root, group); });
  }, std::move(ready));
}

uint64_t Transport::reduce_scatter_sum(const void* input, void* output, int64_t n, kestrel_dtype dtype,
                                       Ready ready) {
  const int count = checked_count(n, "reduce-scatter");
  const MPI_Datatype type = mpi_type(dtype, true).first;
  MPI_Comm group = state_->data;
  return issue(describe("reduce-scatter", n * state_->size, dtype),
               [=] { return MPI_Reduce_scatter_block(input, output, count, type, MPI_SUM, group); },
               std::move(ready));
}

uint64_t Transport::all_gather(const void* input, void* output, int64_t n, kestrel_dtype dtype, Ready ready) {
  const int count = checked_count(n, "all-gather");
  const MPI_Datatype type = mpi_type(dtype, false).first;
  MPI_Comm group = state_->data;
  return issue(describe("all-gather", n * state_->size, dtype),
               [=] { return MPI_Allgather(input, count, type, output, count, type, group); },
               std::move(ready));
}

void Transport::wait(uint64_t ticket) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.changed.wait(lock, [&] { return s.completed >= ticket || s.failed != KESTREL_STATUS_OK; });
  if (s.failed != KESTREL_STATUS_OK && ticket >= s.failed_ticket) fail(s.failure, s.failed);
}

void Transport::check() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->failed != KESTREL_STATUS_OK) fail(state_->failure, state_->failed);
}

void Transport::set_timeout(double seconds) {
  if (!(seconds > 0)) fail("comm_set_timeout: the timeout must be a positive number of seconds");
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->timeout = seconds;
}

kestrel_status Transport::query(std::string& message) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->failed != KESTREL_STATUS_OK) message = state_->failure;
  return state_->failed;
}

void Transport::unique_id(char* id, size_t id_size) {
  if (!id || id_size < 4) fail("comm_unique_id: the id buffer needs 4 bytes");
  std::memcpy(id, "mpi", 4);
}

void Transport::abort(int32_t exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this only tells the compiler so
}

int32_t Transport::rank() const { return state_->rank; }
int32_t Transport::size() const { return state_->size; }

}  // namespace kestrel::mpi_transport
