// The meeting point of the ranks of one process (one thread per device, RunConfig's
// distributed.devices): each call hands in this rank's bytes and returns every rank's, in rank order,
// once all have come. World's host exchanges and ProcessGroup's collectives between devices of one
// process go through it. Engine-internal.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kestrel {

class LocalRendezvous {
 public:
  explicit LocalRendezvous(int size) : size_(size), slots_(size_t(size)), present_(size_t(size)) {}
  int size() const { return size_; }

  // Every rank's `mine` for this round, in rank order. Throws PeerFailed when a rank has not come within
  // `timeout_seconds` (naming those missing and `what`), or when another rank failed the rendezvous.
  std::vector<std::vector<char>> exchange(int rank, std::vector<char> mine, double timeout_seconds,
                                          const std::string& what);
  // The same round read in place: every rank's bytes stay as they are until this rank departs (the next
  // round waits for every rank's departure), so large ones need not be copied.
  const std::vector<std::vector<char>>& arrive(int rank, std::vector<char> mine, double timeout_seconds,
                                               const std::string& what);
  void depart(int rank);
  // Ends the rendezvous for every rank: their current and later exchanges throw PeerFailed with `why`
  // (a rank that stops with an error says so, and the others do not wait for it).
  void fail(const std::string& why);
  // Back to a fresh rendezvous, its failure forgotten: only while no rank is inside it (between one set
  // of the ranks' threads and the next).
  void reset();

 private:
  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::vector<char>> slots_;
  std::vector<bool> present_;
  int arrived_ = 0, departing_ = 0;  // of this round; ranks still reading the last round's slots
  uint64_t round_ = 0;
  std::string failure_;  // non-empty once failed
};

}  // namespace kestrel
