#include "kestrel/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <system_error>

#include "../runtime/device_runtime.h"
#include "../tensor/storage.h"

namespace kestrel::data {

// One pinned host buffer and where it is in its cycle: free -> filling (a worker gathers samples) ->
// ready -> copying (an asynchronous host-to-device copy reads it) -> free.
struct DataLoader::Slot {
  enum class State { free, filling, ready, copying } state = State::free;
  int64_t batch = -1;
  uint64_t generation = 0;
  void* inputs = nullptr;   // pinned: batch_size * sample_numel values (f32) or token ids (i64)
  void* targets = nullptr;  // pinned: batch_size * target_numel labels (i64) or target values (f32)
  kestrel_event* copied = nullptr;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, const Device& device)
    : dataset_(std::move(dataset)), options_(options), device_(device) {
  if (options_.batch_size < 1) throw InvalidArgument(fmt::format("batch size must be >= 1, got {}", options_.batch_size));
  if (dataset_->size < 1) throw InvalidArgument(fmt::format("dataset '{}' is empty", dataset_->name));
  options_.workers = std::max(1, options_.workers);
  options_.prefetch = std::max(2, options_.prefetch);
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    throw InvalidArgument(fmt::format("loader: rank {} of {} processes", options_.rank, options_.world_size));
  // No batch holds more samples than the dataset, however large the batch size asked for; a rank holds
  // its share.
  const int64_t slot_samples = (std::min(options_.batch_size, dataset_->size) + options_.world_size - 1) /
                               options_.world_size;
  try {
    DeviceRuntime& runtime = device_.runtime();
    for (int i = 0; i < options_.prefetch; ++i) {
      auto slot = std::make_unique<Slot>();
      slots_.push_back(std::move(slot));
      slots_.back()->inputs = runtime.host_allocate(checked_bytes(slot_samples, sample_bytes()));
      slots_.back()->targets = runtime.host_allocate(checked_bytes(slot_samples, target_bytes()));
      runtime.check(runtime.api().event_create(runtime.context(), &slots_.back()->copied), "creating an event");
    }
    for (int i = 0; i < options_.workers; ++i) {
      try {
        workers_.emplace_back([this] { worker_loop(); });
      } catch (const std::system_error& e) {
        throw Error(fmt::format("cannot start data loader thread {} of {}: {}; ask for fewer (data.workers in the run "
                                "config)",
                                i + 1, options_.workers, e.what()));
      }
    }
  } catch (...) {
    stop_and_release();  // the destructor will not run for a constructor that throws
    throw;
  }
}

int64_t DataLoader::checked_bytes(int64_t samples, int64_t bytes_per_sample) const {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(samples, bytes_per_sample, &bytes))
    throw InvalidArgument(fmt::format("dataset '{}': {} samples of {} bytes overflow a size; use a smaller batch",
                                      dataset_->name, samples, bytes_per_sample));
  return bytes;
}

DataLoader::~DataLoader() { stop_and_release(); }

void DataLoader::stop_and_release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
  DeviceRuntime& runtime = device_.runtime();
  // No copy may still read a buffer we free. This runs in the destructor too, maybe while an error of the
  // device unwinds the stack: its failure must not throw again (std::terminate); the error on its way
  // out already says what went wrong.
  (void)runtime.api().stream_synchronize(runtime.stream());
  for (auto& slot : slots_) {
    if (slot->copied) runtime.api().event_destroy(slot->copied);
    if (slot->inputs) runtime.host_release(slot->inputs);
    if (slot->targets) runtime.host_release(slot->targets);
  }
  slots_.clear();
  workers_.clear();
}

int64_t DataLoader::batches_per_epoch() const {
  int64_t n = dataset_->size, b = options_.batch_size;
  return options_.drop_last ? n / b : n / b + (n % b != 0);  // no n + b - 1: b may be near 2^63
}

int64_t DataLoader::batch_size_of(int64_t batch) const {
  return std::min(options_.batch_size, dataset_->size - batch * options_.batch_size);
}

std::pair<int64_t, int64_t> DataLoader::share_of(int64_t batch) const {
  // Rank r of N takes [L r / N, L (r + 1) / N) of the batch's L samples: equal shares when N divides L,
  // and every sample once when it does not (the last batch of an epoch).
  const int64_t begin = batch * options_.batch_size, size = batch_size_of(batch);
  const int64_t rank = options_.rank, world = options_.world_size;
  return {begin + size * rank / world, begin + size * (rank + 1) / world};
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = epoch_permutation(dataset_->size, options_.seed, epoch);
  } else {
    order.resize(dataset_->size);
    std::iota(order.begin(), order.end(), 0);
  }
  device_.runtime().synchronize();  // copies of the previous epoch are done with their buffers
  std::lock_guard<std::mutex> lock(mutex_);
  ++generation_;  // batches a worker is still gathering for the old epoch are dropped
  order_ = std::move(order);
  batch_count_ = batches_per_epoch();
  next_fill_ = next_take_ = std::min(skip_batches, batch_count_);
  for (auto& slot : slots_)
    if (slot->state != Slot::State::filling) slot->state = Slot::State::free;
  changed_.notify_all();
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stopping_ || (next_fill_ < batch_count_ &&
                           slots_[next_fill_ % slots_.size()]->state == Slot::State::free);
    });
    if (stopping_) return;
    int64_t batch = next_fill_++;
    Slot& slot = *slots_[batch % slots_.size()];
    slot.state = Slot::State::filling;
    slot.batch = batch;
    slot.generation = generation_;
    // Copy this batch's sample indices now: start_epoch may replace order_ while we gather.
    const auto [begin, end] = share_of(batch);
    std::vector<int64_t> samples(order_.begin() + begin, order_.begin() + end);
    lock.unlock();
    fill(slot, samples);
    lock.lock();
    slot.state = slot.generation == generation_ ? Slot::State::ready : Slot::State::free;
    changed_.notify_all();
  }
}

int64_t DataLoader::sample_bytes() const {
  return dataset_->sample_numel() * (dataset_->sample_dtype == DType::f32 ? 4 : 8);
}

int64_t DataLoader::target_bytes() const { return dataset_->target_numel() * (dataset_->is_classification() ? 8 : 4); }

void DataLoader::fill(Slot& slot, const std::vector<int64_t>& samples) {
  const Dataset& d = *dataset_;
  const int64_t x_bytes = sample_bytes(), y_bytes = target_bytes();
  const char* x = d.sample_dtype == DType::f32 ? reinterpret_cast<const char*>(d.features.data())
                                                : reinterpret_cast<const char*>(d.tokens.data());
  const char* y = d.is_classification() ? reinterpret_cast<const char*>(d.labels.data())
                                        : reinterpret_cast<const char*>(d.targets.data());
  for (size_t i = 0; i < samples.size(); ++i) {
    std::memcpy(static_cast<char*>(slot.inputs) + i * x_bytes, x + samples[i] * x_bytes, x_bytes);
    std::memcpy(static_cast<char*>(slot.targets) + i * y_bytes, y + samples[i] * y_bytes, y_bytes);
  }
}

void DataLoader::release_copied_slots(int keep) {
  // A slot's buffer may be refilled once its copy has reached the device; the newest `keep` copying
  // slots are left in flight (the device is probably still busy with them).
  DeviceRuntime& runtime = device_.runtime();
  for (auto& slot : slots_) {
    if (slot->state != Slot::State::copying || slot->batch >= next_take_ - keep) continue;
    runtime.check(runtime.api().event_synchronize(slot->copied), "waiting for a batch copy");
    slot->state = Slot::State::free;
  }
}

bool DataLoader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (next_take_ >= batch_count_) return false;
  const int64_t batch = next_take_;
  Slot& slot = *slots_[batch % slots_.size()];
  changed_.wait(lock, [&] { return slot.state == Slot::State::ready && slot.batch == batch; });
  lock.unlock();

  const Dataset& d = *dataset_;
  const auto [begin, end] = share_of(batch);
  const int64_t size = end - begin;
  Shape input_shape{size}, target_shape{size};
  input_shape.insert(input_shape.end(), d.sample_shape.begin(), d.sample_shape.end());
  const Shape& per_sample_target = d.is_classification() ? d.label_shape : d.target_shape;
  target_shape.insert(target_shape.end(), per_sample_target.begin(), per_sample_target.end());
  out.inputs = Tensor::empty(input_shape, d.sample_dtype, device_);
  out.targets = Tensor::empty(target_shape, d.is_classification() ? DType::i64 : DType::f32, device_);
  out.index = batch;
  out.size = size;
  out.global_size = batch_size_of(batch);
  DeviceRuntime& runtime = device_.runtime();
  const auto& api = runtime.api();
  runtime.check(api.copy_host_to_device(runtime.stream(), out.inputs.storage()->buffer(), 0, slot.inputs,
                                        size * sample_bytes()),
                "copying a batch to the device");
  runtime.check(api.copy_host_to_device(runtime.stream(), out.targets.storage()->buffer(), 0, slot.targets,
                                        size * target_bytes()),
                "copying a batch to the device");
  runtime.check(api.event_record(slot.copied, runtime.stream()), "recording a copy event");

  lock.lock();
  slot.state = Slot::State::copying;
  ++next_take_;
  release_copied_slots(1);
  changed_.notify_all();
  return true;
}

}  // namespace kestrel::data
