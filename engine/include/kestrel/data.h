// Host-side datasets: samples as plain float vectors, loaded from IDX (MNIST-style) and CSV files or
// generated from a seed, plus the per-epoch shuffle order. Everything here is deterministic and
// platform-independent, so a run started from the same seed sees the same data in the same order on
// every machine and standard library.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/tensor.h"  // Shape, shape_numel

namespace kestrel::data {

// A whole dataset in host memory. Either a classification set (labels, num_classes > 0) or a
// regression set (targets, target_shape). Samples are f32 values (features) or i64 token ids (tokens,
// for sequence models), stored the same way for both kinds of set.
struct Dataset {
  std::string name;
  Shape sample_shape;            // per-sample shape without the batch dim, e.g. {1, 28, 28}, or {T} tokens
  DType sample_dtype = DType::f32;  // f32: `features` holds the samples; i64: `tokens` does
  int64_t size = 0;              // number of samples
  std::vector<float> features;   // f32 samples: size * sample_numel(), row-major, sample after sample
  std::vector<int64_t> tokens;   // i64 samples (token ids), laid out the same way
  int64_t token_count = 0;       // i64 samples: the ids are in [0, token_count) (a vocabulary's size)
  Shape label_shape;             // classification: {} for one label per sample, {T} for one per position
  std::vector<int64_t> labels;   // classification: label_numel() per sample, in [0, num_classes)
  int64_t num_classes = 0;       // > 0 for classification
  Shape target_shape;            // regression: per-sample target shape (e.g. {5})
  std::vector<float> targets;    // regression: size * target_numel()
  std::vector<std::string> class_names;  // classification: a name per class where the data has them

  bool is_classification() const { return num_classes > 0; }
  // For printing: the class's name, or "class N".
  std::string class_name(int64_t label) const;
  int64_t sample_numel() const;
  int64_t target_numel() const;  // classification: labels per sample (1, or one per position)
  // A copy of the first `count` samples (all of them when count <= 0 or count >= size).
  Dataset subset(int64_t count) const;
};

// IDX files, the MNIST format: a big-endian magic (0x00000803 for images, 0x00000801 for labels), the
// big-endian u32 dims, then u8 data. Read through zlib, so both .gz and uncompressed files work.
// Pixels become value / 255 in [0, 1]; sample_shape is {1, rows, cols}. num_classes is max label + 1,
// but never below 10 when every label is in 0..9, so a subset that lacks a class keeps MNIST's 10.
// Any problem (missing file, bad magic, truncated data, image/label count mismatch) throws
// InvalidArgument naming the file and what is wrong.
Dataset load_idx(const std::string& images_path, const std::string& labels_path);

struct TrainTest {
  Dataset train, test;
};

// Fashion-MNIST as installed by Debian's dataset-fashion-mnist package:
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz in `dir`, with its class names. A missing folder is an InvalidArgument that
// says to install that package.
TrainTest load_fashion_mnist(const std::string& dir = "/usr/share/datasets/fashion-mnist");

// In place: x = (x - mean[c]) / std[c] for channel c = the first dim of sample_shape (one channel when
// sample_shape is empty). A single mean or std applies to every channel. Throws InvalidArgument when
// the number of values is neither 1 nor the channel count, or when a std is <= 0 (or not finite).
void normalize(Dataset& dataset, const std::vector<double>& mean, const std::vector<double>& std);

// CSV with a header row and numeric cells only (no quoting inside data rows).
//  - classification: `target_column` (negative counts from the end) holds integer labels 0..K-1;
//    num_classes = max label + 1. target_columns must be 1.
//  - regression: the targets are the `target_columns` consecutive columns ending at `target_column`,
//    so the default target_column = -1 takes the last `target_columns` columns; target_shape is
//    {target_columns}.
// Every other column is a feature: sample_shape is {feature columns}. Errors name the file, the line
// and the column (number and header name).
struct CsvOptions {
  int target_column = -1;
  bool classification = true;
  int target_columns = 1;
};
Dataset load_csv(const std::string& path, const CsvOptions& options = {});

// Random classification data, like the seeds' benchmark (torch.randn features, torch.randint labels):
// features standard normal, labels uniform in [0, classes). The features are exactly what
// ops::random_(NORMAL, seed, offset 0, mean 0, std 1) draws on any backend; labels come from a separate
// Philox counter range. Sample i does not depend on `size`, so a smaller set is a prefix of a larger.
Dataset synthetic_classification(int64_t size, const Shape& sample_shape, int64_t classes, uint64_t seed);

// Linear regression data, like the seeds' LinearRegression example: x standard normal with
// sample_shape {in_features}, y = x @ A^T + b + 0.01 * noise with target_shape {out_features}, where A
// (out_features, in_features), b and the noise are standard normal draws from the same seed.
Dataset synthetic_regression(int64_t size, int64_t in_features, int64_t out_features, uint64_t seed);

// The sample order for one epoch: a permutation of 0..size-1 that depends only on (seed, epoch) — a
// Fisher-Yates shuffle driven by unbiased integer draws from Philox words in a counter range of its
// own per epoch. Identical on every platform. Needs 0 <= epoch < 2^31 and size <= 2^32.
std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch);

}  // namespace kestrel::data
