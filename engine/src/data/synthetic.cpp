// Seeded synthetic datasets for benchmarks and examples (the seeds use torch.randn / torch.randint).
// Each quantity has its own Philox counter stream, so sample i never depends on `size` or on how much
// of another quantity was drawn.
#include <fmt/format.h>

#include <algorithm>

#include "kestrel/data.h"
#include "kestrel/error.h"
#include "philox_draws.h"

namespace kestrel::data {
namespace {

using detail::fill_normal;
using detail::stream_offset;

// Stream numbers (see detail::stream_offset), per generator. Features stay in stream 0, the counters
// ops::random_ uses at offset 0, so a device can regenerate the same inputs.
constexpr uint64_t kFeatures = 0;
constexpr uint64_t kLabels = 1;                          // classification
constexpr uint64_t kWeights = 1, kBias = 2, kNoise = 3;  // regression

void check_draw_count(const char* what, int64_t rows, int64_t per_row) {
  // Two normals per Philox block; a stream holds 2^48 blocks.
  if (per_row > 0 && rows > static_cast<int64_t>(detail::kStreamBlocks * 2 / static_cast<uint64_t>(per_row)))
    throw InvalidArgument(fmt::format("{}: {} x {} random values exceed the 2^49 a stream can draw", what, rows,
                                      per_row));
}

}  // namespace

Dataset synthetic_classification(int64_t size, const Shape& sample_shape, int64_t classes, uint64_t seed) {
  if (size < 0) throw InvalidArgument(fmt::format("synthetic_classification: size {} is negative", size));
  if (classes < 1 || classes > (int64_t{1} << 32))
    throw InvalidArgument(fmt::format("synthetic_classification: classes is {}; it must be in [1, 2^32]", classes));
  for (int64_t dim : sample_shape)
    if (dim <= 0)
      throw InvalidArgument(fmt::format("synthetic_classification: sample shape {} has a dim <= 0",
                                        shape_str(sample_shape)));
  Dataset dataset;
  dataset.name = fmt::format("synthetic-classification-{}", seed);
  dataset.sample_shape = sample_shape;
  dataset.size = size;
  dataset.num_classes = classes;
  check_draw_count("synthetic_classification", size, dataset.sample_numel());
  dataset.features.resize(static_cast<size_t>(size * dataset.sample_numel()));
  fill_normal(dataset.features.data(), size * dataset.sample_numel(), seed, stream_offset(kFeatures));
  detail::PhiloxWords words(seed, stream_offset(kLabels));
  dataset.labels.resize(static_cast<size_t>(size));
  for (int64_t& label : dataset.labels) label = static_cast<int64_t>(words.below(static_cast<uint64_t>(classes)));
  return dataset;
}

Dataset synthetic_regression(int64_t size, int64_t in_features, int64_t out_features, uint64_t seed) {
  if (size < 0 || in_features < 1 || out_features < 1)
    throw InvalidArgument(fmt::format("synthetic_regression: size {}, in_features {}, out_features {}: "
                                      "the size must be >= 0 and the feature counts >= 1",
                                      size, in_features, out_features));
  check_draw_count("synthetic_regression", size, std::max(in_features, out_features));
  check_draw_count("synthetic_regression", out_features, in_features);
  Dataset dataset;
  dataset.name = fmt::format("synthetic-regression-{}", seed);
  dataset.sample_shape = {in_features};
  dataset.target_shape = {out_features};
  dataset.size = size;

  std::vector<float> weight(static_cast<size_t>(out_features * in_features)), bias(out_features);
  fill_normal(weight.data(), out_features * in_features, seed, stream_offset(kWeights));
  fill_normal(bias.data(), out_features, seed, stream_offset(kBias));
  dataset.features.resize(static_cast<size_t>(size * in_features));
  fill_normal(dataset.features.data(), size * in_features, seed, stream_offset(kFeatures));
  dataset.targets.resize(static_cast<size_t>(size * out_features));
  fill_normal(dataset.targets.data(), size * out_features, seed, stream_offset(kNoise));

  // y = x @ A^T + b + 0.01 * noise, accumulated in double in a fixed order so every platform agrees.
  for (int64_t n = 0; n < size; ++n) {
    const float* x = &dataset.features[n * in_features];
    float* y = &dataset.targets[n * out_features];
    for (int64_t o = 0; o < out_features; ++o) {
      const float* a = &weight[o * in_features];
      double sum = bias[o];
      for (int64_t i = 0; i < in_features; ++i) sum += double{a[i]} * double{x[i]};
      y[o] = static_cast<float>(sum + 0.01 * double{y[o]});
    }
  }
  return dataset;
}

}  // namespace kestrel::data
