// The data loader: every sample once per epoch in the (seed, epoch) order, batches on the device,
// drop_last, resuming mid-epoch, and restarting an epoch while workers are busy.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>

#include "kestrel/engine.h"
#include "kestrel/loader.h"

namespace {

using kestrel::data::Batch;
using kestrel::data::DataLoader;

std::shared_ptr<const kestrel::data::Dataset> numbered(int64_t size) {
  auto d = std::make_shared<kestrel::data::Dataset>();
  d->name = "numbered";
  d->sample_shape = {2};
  d->size = size;
  d->num_classes = 1000;
  for (int64_t i = 0; i < size; ++i) {
    d->features.push_back(float(i));
    d->features.push_back(float(-i));
    d->labels.push_back(i);
  }
  return d;
}

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

std::vector<int64_t> epoch_labels(DataLoader& loader, int64_t epoch, int64_t skip = 0) {
  loader.start_epoch(epoch, skip);
  std::vector<int64_t> labels;
  Batch batch;
  while (loader.next(batch)) {
    auto x = batch.inputs.to_vector<float>();
    auto y = batch.targets.to_vector<int64_t>();
    EXPECT_EQ(batch.inputs.shape(), (kestrel::Shape{batch.size, 2}));
    for (int64_t i = 0; i < batch.size; ++i) {
      EXPECT_EQ(x[2 * i], float(y[i]));  // features travel with their label
      EXPECT_EQ(x[2 * i + 1], -float(y[i]));
      labels.push_back(y[i]);
    }
  }
  return labels;
}

// Token-id samples with one label per position (what a sequence model trains on) travel as i64 batches
// (B, T) with (B, T) labels, each sample's ids beside its own labels, in the seeded order.
TEST(DataLoader, TokenSamplesWithALabelPerPosition) {
  auto d = std::make_shared<kestrel::data::Dataset>();
  d->name = "tokens";
  d->sample_shape = {3};
  d->sample_dtype = kestrel::DType::i64;
  d->label_shape = {3};
  d->num_classes = 1000;
  d->size = 11;
  for (int64_t i = 0; i < d->size; ++i)
    for (int64_t t = 0; t < 3; ++t) {
      d->tokens.push_back(10 * i + t);      // sample i, position t
      d->labels.push_back(10 * i + t + 1);  // the next token
    }
  DataLoader loader(d, {4, true, false, 9, 2, 4}, cpu());
  loader.start_epoch(0);
  std::vector<int64_t> order;
  Batch batch;
  while (loader.next(batch)) {
    EXPECT_EQ(batch.inputs.dtype(), kestrel::DType::i64);
    EXPECT_EQ(batch.inputs.shape(), (kestrel::Shape{batch.size, 3}));
    EXPECT_EQ(batch.targets.shape(), (kestrel::Shape{batch.size, 3}));
    auto x = batch.inputs.to_vector<int64_t>();
    auto y = batch.targets.to_vector<int64_t>();
    for (int64_t k = 0; k < batch.size * 3; ++k) EXPECT_EQ(y[k], x[k] + 1);
    for (int64_t b = 0; b < batch.size; ++b) order.push_back(x[3 * b] / 10);
  }
  EXPECT_EQ(order, kestrel::data::epoch_permutation(11, 9, 0));
  auto first = d->subset(5);
  EXPECT_EQ(first.tokens.size(), 15u);
  EXPECT_EQ(first.labels.size(), 15u);
  EXPECT_EQ(first.sample_dtype, kestrel::DType::i64);
}

// A batch size near 2^62 (a typo'd flag) gives one batch of the whole dataset, not an overflowed size
// and a write past the pinned buffer.
TEST(DataLoader, AHugeBatchSizeIsOneBatchOfEverything) {
  auto data = numbered(25);
  DataLoader loader(data, {int64_t(1) << 62, true, false, 3, 2, 4}, cpu());
  EXPECT_EQ(loader.batches_per_epoch(), 1);
  auto labels = epoch_labels(loader, 0);
  EXPECT_EQ(labels, kestrel::data::epoch_permutation(25, 3, 0));
  DataLoader dropping(data, {std::numeric_limits<int64_t>::max(), true, true, 3, 2, 4}, cpu());
  EXPECT_EQ(dropping.batches_per_epoch(), 0);
}

// Worker threads that cannot be created (here: an address-space limit leaves no room for their stacks)
// are an error naming data.workers, not "terminate called without an active exception".
TEST(DataLoader, WorkersThatCannotStartAreAClearError) {
  auto data = numbered(25);
  cpu();  // the engine and its plugins are loaded before the limit
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    std::ifstream status("/proc/self/statm");
    uint64_t pages = 0;
    status >> pages;
    limit.rlim_cur = pages * uint64_t(sysconf(_SC_PAGESIZE)) + (uint64_t(64) << 20);  // 64 MiB more than now
    setrlimit(RLIMIT_AS, &limit);
    try {
      DataLoader loader(data, {5, true, false, 3, 64, 4}, cpu());  // 64 stacks of 8 MiB do not fit
      _exit(1);
    } catch (const kestrel::Error& e) {
      _exit(std::string(e.what()).find("data.workers") != std::string::npos ? 0 : 2);
    } catch (...) {
      _exit(3);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the threads started; 2: another message; 3: another exception";
}

TEST(DataLoader, EachEpochIsTheSeededPermutation) {
  auto data = numbered(103);
  DataLoader loader(data, {10, true, false, 5, 3, 4}, cpu());
  EXPECT_EQ(loader.batches_per_epoch(), 11);
  for (int64_t epoch : {0, 1}) {
    auto labels = epoch_labels(loader, epoch);
    EXPECT_EQ(labels, kestrel::data::epoch_permutation(103, 5, epoch));
  }
}

TEST(DataLoader, DropLastAndNoShuffle) {
  auto data = numbered(25);
  DataLoader loader(data, {8, false, true, 0, 2, 3}, cpu());
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  std::vector<int64_t> expected(24);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(epoch_labels(loader, 0), expected);
}

TEST(DataLoader, SkippingResumesMidEpoch) {
  auto data = numbered(50);
  DataLoader loader(data, {7, true, false, 9, 2, 4}, cpu());
  auto all = epoch_labels(loader, 3);
  auto rest = epoch_labels(loader, 3, 4);
  EXPECT_EQ(rest, std::vector<int64_t>(all.begin() + 28, all.end()));
}

TEST(DataLoader, RestartingAnEpochEarlyIsSafe) {
  auto data = numbered(1000);
  DataLoader loader(data, {16, true, false, 1, 3, 6}, cpu());
  for (int round = 0; round < 20; ++round) {
    loader.start_epoch(round);
    Batch batch;
    ASSERT_TRUE(loader.next(batch));  // take one, abandon the rest while workers are still filling
  }
  auto labels = epoch_labels(loader, 7);
  EXPECT_EQ(labels, kestrel::data::epoch_permutation(1000, 1, 7));
}

TEST(DataLoader, RegressionTargets) {
  auto d = std::make_shared<kestrel::data::Dataset>(kestrel::data::synthetic_regression(20, 2, 3, 4));
  DataLoader loader(d, {6, false, false, 0, 1, 2}, cpu());
  loader.start_epoch(0);
  Batch batch;
  ASSERT_TRUE(loader.next(batch));
  EXPECT_EQ(batch.targets.shape(), (kestrel::Shape{6, 3}));
  EXPECT_EQ(batch.targets.to_vector<float>(), std::vector<float>(d->targets.begin(), d->targets.begin() + 18));
}

}  // namespace
