#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu_parallel.hpp"

namespace kestrel_cpu {

int host_threads() {
  static const int threads = [] {
    if (Exec().concurrency() > 1) return 1;
    const char* asked = std::getenv("KESTREL_CPU_THREADS");
    if (!asked) asked = std::getenv("KESTREL_CPU_UPDATE_THREADS");
    const long n = asked ? std::strtol(asked, nullptr, 10) : long(std::thread::hardware_concurrency());
    return int(std::clamp(n, 1L, 256L));
  }();
  return threads;
}

namespace {

// A new thread starts on its creator's core, and the cores beside it are rarely idle during training:
// OpenBLAS's workers keep spinning (and yielding) for a while after each GEMM, so the scheduler sees no
// idle core to move a helper to. Measured in a seeds'-MLP step on 2 cores: the Adam update took 3.1-3.6 ms
// with its helper left where it started, 1.8-2.2 ms with the helper kept off the creator's core. The
// process's own affinity (taskset, cgroups) is respected.
void keep_off_this_core(std::thread& helper) {
#ifdef __linux__
  cpu_set_t allowed;
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return;
  const int here = sched_getcpu();
  if (here < 0 || !CPU_ISSET(here, &allowed) || CPU_COUNT(&allowed) < 2) return;
  CPU_CLR(here, &allowed);
  pthread_setaffinity_np(helper.native_handle(), sizeof(allowed), &allowed);  // a hint: failing is harmless
#else
  (void)helper;
#endif
}

// One loop on the pool: pieces of [0, count) handed out through a shared counter.
struct Loop {
  ChunkRef chunk;
  int64_t count, piece;
  std::atomic<int64_t> next{0};

  void take_pieces() {
    for (int64_t begin = next.fetch_add(piece); begin < count; begin = next.fetch_add(piece))
      chunk.call(chunk.self, begin, std::min(count, begin + piece));
  }
};

// Helper threads parked on a condition variable between loops. A loop asks for some of them; the caller
// takes pieces too, then closes the loop and waits only for the helpers that joined it (one that wakes
// after the loop has closed finds nothing and sleeps again), so the loop's state may live on its stack.
class Pool {
 public:
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) {
      workers_.emplace_back([this] { serve(); });
      keep_off_this_core(workers_.back());
    }
  }

  ~Pool() {  // also on dlclose of the plugin: no thread may outlive the code it runs
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  void run(Loop& loop, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      loop_ = &loop;
      wanted_ = helpers;
    }
    for (int i = 0; i < helpers; ++i) wake_.notify_one();
    loop.take_pieces();
    std::unique_lock<std::mutex> lock(mutex_);
    loop_ = nullptr;
    wanted_ = 0;
    done_.wait(lock, [&] { return running_ == 0; });
  }

  int helpers() const { return int(workers_.size()); }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || (loop_ != nullptr && wanted_ > 0); });
      if (stopping_) return;
      --wanted_;
      ++running_;
      Loop* loop = loop_;
      lock.unlock();
      loop->take_pieces();
      lock.lock();
      if (--running_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  Loop* loop_ = nullptr;
  int wanted_ = 0, running_ = 0;
  bool stopping_ = false;
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
  static Pool pool(host_threads() - 1);  // started on first use, by the first large loop
  const int helpers = std::min(threads - 1, pool.helpers());
  // A few pieces per thread, so that threads that run take over the work of one that is held up.
  Loop loop{chunk, count, std::max<int64_t>(1, count / (int64_t(helpers + 1) * 4))};
  pool.run(loop, helpers);
}

}  // namespace kestrel_cpu
