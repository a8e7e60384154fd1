// Batches for training: background worker threads gather shuffled samples into pinned host buffers and
// the loader copies each batch to the device asynchronously, so the device does not wait on the host.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kestrel/data.h"
#include "kestrel/tensor.h"

namespace kestrel::data {

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;     // a new order every epoch, from (seed, epoch)
  bool drop_last = false;  // drop a final smaller batch
  uint64_t seed = 0;
  int workers = 2;         // threads preparing batches
  int prefetch = 4;        // batches prepared ahead (pinned buffers in flight)
  // Data parallelism: batch_size is the global batch, cut in rank order into world_size shares (as equal
  // as its size allows); this loader gives rank `rank`'s share of each.
  int rank = 0, world_size = 1;
};

struct Batch {
  Tensor inputs;   // (B, sample_shape...) on the device: f32 values or i64 token ids, as the dataset holds
  Tensor targets;  // (B, label_shape...) i64 labels (one per sample or per position), or (B, target_shape...) f32
  int64_t index = 0;
  int64_t size = 0;         // samples in this rank's share
  int64_t global_size = 0;  // samples in the batch over all ranks
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, const Device& device);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const;
  const Dataset& dataset() const { return *dataset_; }
  // Begins an epoch, skipping its first `skip_batches` batches (to resume a run mid-epoch).
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  // The next batch of the epoch, or false at its end.
  bool next(Batch& batch);

 private:
  struct Slot;
  void worker_loop();
  void fill(Slot& slot, const std::vector<int64_t>& samples);
  int64_t checked_bytes(int64_t samples, int64_t bytes_per_sample) const;  // throws on overflow
  void stop_and_release();       // joins the workers, frees the pinned buffers (destructor, failed constructor)
  int64_t sample_bytes() const;  // one sample's inputs
  int64_t target_bytes() const;  // one sample's labels or targets
  void release_copied_slots(int keep);
  int64_t batch_size_of(int64_t batch) const;          // the global batch's samples
  std::pair<int64_t, int64_t> share_of(int64_t batch) const;  // this rank's [begin, end) of the epoch's order

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  Device device_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int64_t> order_;
  int64_t batch_count_ = 0, next_fill_ = 0, next_take_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> workers_;
};

}  // namespace kestrel::data
