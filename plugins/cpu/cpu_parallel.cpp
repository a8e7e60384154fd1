#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu_parallel.hpp"

namespace kestrel_cpu {

namespace {

// CPUs in the process's affinity mask (taskset, cpusets): hardware_concurrency() counts every online CPU.
int usable_cpus() {
#ifdef __linux__
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) return CPU_COUNT(&allowed);
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

int host_threads() {
  static const int threads = [] {
    if (Exec().concurrency() > 1) return 1;
    const char* asked = std::getenv("KESTREL_CPU_THREADS");
    if (!asked) asked = std::getenv("KESTREL_CPU_UPDATE_THREADS");
    const long n = asked ? std::strtol(asked, nullptr, 10) : long(usable_cpus());
    return int(std::clamp(n, 1L, 256L));
  }();
  return threads;
}

namespace {

// Where helpers run. A new thread usually starts on its creator's core, and the scheduler rarely moves
// it during training: the other cores are never idle, because OpenBLAS's workers keep spinning (and
// yielding) for a while after each GEMM. So each helper is moved off its creator's CPU when it starts
// (the kernel spreads threads so moved over the CPUs they may use). The calling thread does not stay
// put either, and a helper pinned only then ends up sharing a core with the caller whenever the caller
// has moved there (seen with `perf sched` on 2 cores: the caller spent 70% of its time on the helper's
// core). So each time a helper joins a loop it also checks that it is not on the caller's CPU, and if it
// is, it moves again (a few syscalls, only then). Both moves narrow the helper to the CPUs the pool's
// creator could use, and the process still may, except the one to avoid. CPUs are logical ones: an SMT
// sibling of the caller's counts as another CPU.
class Placement {
 public:
  Placement() {
#ifdef __linux__
    usable_ = pthread_getaffinity_np(pthread_self(), sizeof(allowed_), &allowed_) == 0 && CPU_COUNT(&allowed_) > 1;
#endif
  }

  static int this_cpu() {
#ifdef __linux__
    return sched_getcpu();
#else
    return -1;
#endif
  }

  // Called by a helper joining a loop of a caller that was on `caller_cpu` when it started the loop.
  void step_aside(int caller_cpu) const {
#ifdef __linux__
    if (caller_cpu >= 0 && this_cpu() == caller_cpu) keep_off(pthread_self(), caller_cpu);
#else
    (void)caller_cpu;
#endif
  }

  // Called by the pool's creator for each helper it starts.
  void start_apart(std::thread& helper) const { keep_off(helper.native_handle(), this_cpu()); }

 private:
  void keep_off(std::thread::native_handle_type thread, int cpu) const {
#ifdef __linux__
    if (!usable_ || cpu < 0 || !CPU_ISSET(cpu, &allowed_)) return;
    cpu_set_t others = allowed_, now;
    if (sched_getaffinity(getpid(), sizeof(now), &now) == 0) CPU_AND(&others, &others, &now);  // taskset -p since
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) > 0) pthread_setaffinity_np(thread, sizeof(others), &others);  // failing is harmless
#else
    (void)thread, (void)cpu;
#endif
  }

#ifdef __linux__
  cpu_set_t allowed_{};  // the creating thread's affinity mask
#endif
  bool usable_ = false;
};

// One loop on the pool: pieces of [0, count) handed out through a shared counter.
struct Loop {
  ChunkRef chunk;
  int64_t count, piece;
  int caller_cpu;
  std::atomic<int64_t> next{0};

  void take_pieces() {
    for (int64_t begin = next.fetch_add(piece); begin < count; begin = next.fetch_add(piece))
      chunk.call(chunk.self, begin, std::min(count, begin + piece));
  }
};

// How long a thread waits for the pool's next event before it sleeps. Waking a parked thread costs tens
// of microseconds on a virtual machine (an interrupt to a halted virtual CPU), and the next op's loop
// usually comes sooner: an LSTM step's GEMM and cell, forward and backward, are four loops about 100 us
// apart. Spinning this long gained 10-25% on lstm_generator's and the MLP's CPU steps (side by side,
// bench/results/2026-11-25-vm-cpu-lstm-sequence-node.md).
constexpr auto kSpin = std::chrono::microseconds(100);

// Helper threads parked on a condition variable between loops. A loop asks for some of them; the caller
// takes pieces too, then closes the loop and waits only for the helpers that joined it (one that wakes
// after the loop has closed finds nothing and sleeps again), so the loop's state may live on its stack.
// Both sides spin a while (kSpin) before they sleep: a helper for the next loop, the caller for the
// helpers still in this one.
class Pool {
 public:
  // Keeps the helpers that started if the system refuses more threads (a pids cgroup, RLIMIT_NPROC).
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) {
      try {
        workers_.emplace_back([this] { serve(); });
      } catch (const std::system_error&) {
        break;
      }
      placement_.start_apart(workers_.back());
    }
  }

  void run(Loop& loop, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      loop_ = &loop;
      wanted_ = helpers;
      posted_.fetch_add(1, std::memory_order_release);
    }
    for (int i = 0; i < helpers; ++i) wake_.notify_one();
    loop.take_pieces();
    std::unique_lock<std::mutex> lock(mutex_);
    loop_ = nullptr;
    wanted_ = 0;
    if (running_ != 0) {
      lock.unlock();
      spin_until([&] { return running_.load(std::memory_order_acquire) == 0; });
      lock.lock();
    }
    done_.wait(lock, [&] { return running_ == 0; });
  }

  int helpers() const { return int(workers_.size()); }

 private:
  // Polls `ready` for up to kSpin, yielding the core to any thread with work on it (an OpenBLAS worker
  // in a large GEMM) between polls. The caller then takes the mutex and waits as usual.
  template <class Ready>
  static void spin_until(const Ready& ready) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (!ready() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const uint64_t seen = posted_.load(std::memory_order_acquire);
      if (!(loop_ != nullptr && wanted_ > 0)) {
        lock.unlock();
        spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return loop_ != nullptr && wanted_ > 0; });
      --wanted_;
      ++running_;
      Loop* loop = loop_;
      lock.unlock();
      placement_.step_aside(loop->caller_cpu);
      loop->take_pieces();
      lock.lock();
      if (--running_ == 0) done_.notify_one();
    }
  }

  const Placement placement_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  Loop* loop_ = nullptr;
  int wanted_ = 0;
  // Changed under the mutex; atomic because spinning threads read them without it.
  std::atomic<int> running_{0};      // helpers inside the current loop
  std::atomic<uint64_t> posted_{0};  // loops posted so far
  std::vector<std::thread> workers_;
};

}  // namespace

void run_pieces(int threads, int64_t count, ChunkRef chunk) {
  static std::mutex in_use;  // one loop on the pool at a time; other callers run theirs alone
  std::unique_lock<std::mutex> mine(in_use, std::try_to_lock);
  if (!mine.owns_lock() || threads <= 1) {
    chunk.call(chunk.self, 0, count);
    return;
  }
  // Started by the first large loop and never destroyed: the engine keeps the plugin loaded for the life
  // of the process (RTLD_NODELETE), and a pool torn down at exit could still be reached by a loop of
  // another thread or of a static engine being destroyed. The parked helpers end with the process.
  static Pool& pool = *new Pool(host_threads() - 1);
  const int helpers = std::min(threads - 1, pool.helpers());
  // A few pieces per thread, so that threads that run take over the work of one that is held up.
  Loop loop{chunk, count, std::max<int64_t>(1, count / (int64_t(helpers + 1) * 4)), Placement::this_cpu()};
  pool.run(loop, helpers);
}

}  // namespace kestrel_cpu
