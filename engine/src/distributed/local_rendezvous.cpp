// Rounds of all-to-all exchange between the threads of one process: a round fills every rank's slot,
// then each rank reads them all, and the next round waits until the last rank has departed.
#include "local_rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kestrel/distributed.h"

namespace kestrel {

std::vector<std::vector<char>> LocalRendezvous::exchange(int rank, std::vector<char> mine, double timeout_seconds,
                                                         const std::string& what) {
  std::vector<std::vector<char>> all = arrive(rank, std::move(mine), timeout_seconds, what);
  depart(rank);
  return all;
}

const std::vector<std::vector<char>>& LocalRendezvous::arrive(int rank, std::vector<char> mine, double timeout_seconds,
                                                              const std::string& what) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  auto failed = [&] { return !failure_.empty(); };
  changed_.wait(lock, [&] { return departing_ == 0 || failed(); });  // the last round's readers are done
  if (failed()) throw PeerFailed(failure_);
  slots_[size_t(rank)] = std::move(mine);
  present_[size_t(rank)] = true;
  const uint64_t round = round_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    departing_ = size_;
    ++round_;
    changed_.notify_all();
  } else if (!changed_.wait_until(lock, deadline, [&] { return round_ != round || failed(); })) {
    std::string missing;
    for (int r = 0; r < size_; ++r)
      if (!present_[size_t(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    failure_ = fmt::format("{}: rank(s) {} of this process's {} did not join it within {:g} s", what, missing, size_,
                           timeout_seconds);
    changed_.notify_all();
  }
  if (failed()) throw PeerFailed(failure_);
  return slots_;  // nobody writes them until every rank has departed
}

void LocalRendezvous::depart(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  present_[size_t(rank)] = false;
  if (--departing_ == 0) changed_.notify_all();
}

void LocalRendezvous::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fill(present_.begin(), present_.end(), false);
  arrived_ = departing_ = 0;
  failure_.clear();
}

void LocalRendezvous::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) failure_ = why;
  changed_.notify_all();
}

}  // namespace kestrel
