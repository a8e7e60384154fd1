// Datasets named by a run config, loaded and normalised. Engine-internal.
#include "run_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <new>

#include "kestrel/io.h"

namespace kestrel {

namespace {

constexpr uint64_t kMaxVocabularyFileBytes = uint64_t(64) << 20;  // a vocabulary.json is a few KB to a few MB

// Which data a split came from, for messages: the file when there is one.
std::string origin(const RunConfig& config, const std::string& split) {
  const DataConfig& d = config.data;
  if (d.dataset == "csv") {
    const std::string& file = split == "test" && !d.test_file.empty() ? d.test_file : d.train_file;
    return fmt::format("{} data ({})", split, file);
  }
  if (d.dataset == "text") return fmt::format("text {} data ({})", split == "test" ? "validation" : split, d.path);
  return fmt::format("{} {} data{}", d.dataset, split, d.path.empty() ? "" : " in " + d.path);
}

// Each split against the model and the loss, so that a test file of another shape or with labels beyond
// the model's classes fails here, naming it, and not at the first evaluation.
void check_fits(const data::Dataset& split, const std::string& origin, const RunConfig& config, const ModelSpec& spec) {
  if (split.sample_shape != spec.input_shape())
    throw ConfigError(fmt::format("{}: the {} has samples {} but the model {} takes {}", config.source, origin,
                                  shape_str(split.sample_shape), spec.source(), shape_str(spec.input_shape())));
  if (split.sample_dtype != spec.input_dtype())
    throw ConfigError(fmt::format("{}: the {} holds {} samples but the model {} takes {}; set the model's input dtype "
                                  "to what the data holds",
                                  config.source, origin, dtype_name(split.sample_dtype), spec.source(),
                                  dtype_name(spec.input_dtype())));
  const Shape& model_out = spec.layers()[spec.output()].output_shape;
  // An id past an embedding's rows would read outside its table: refused here, before any step.
  if (split.sample_dtype == DType::i64 && split.token_count > spec.token_limit())
    throw ConfigError(fmt::format("{}: the {} has token ids 0 to {} but the model {} embeds only {}; set its "
                                  "embedding's num_embeddings to at least {}",
                                  config.source, origin, split.token_count - 1, spec.source(), spec.token_limit(),
                                  split.token_count));
  if (config.loss == LossKind::cross_entropy) {
    if (!split.is_classification())
      throw ConfigError(fmt::format("{}: /loss: cross_entropy needs class labels; the {} is regression (use mse)",
                                    config.source, origin));
    // One score per class for every label: (N, C) for a label per sample, (N, T, C) for one per position.
    Shape scores{-1};
    scores.insert(scores.end(), split.label_shape.begin(), split.label_shape.end());
    const bool fits = model_out.size() == scores.size() + 1 &&
                      std::equal(scores.begin() + 1, scores.end(), model_out.begin() + 1) &&
                      model_out.back() >= split.num_classes;
    if (!fits)
      throw ConfigError(fmt::format("{}: the model's output {} cannot score the {} classes of the {} (labels 0 to {}{})",
                                    config.source, shape_str(model_out), split.num_classes, origin,
                                    split.num_classes - 1,
                                    split.label_shape.empty() ? "" : fmt::format(", one per position of {}",
                                                                                 shape_str(split.label_shape))));
  } else if (split.is_classification()) {
    throw ConfigError(fmt::format("{}: /loss: mse needs regression targets; the {} has class labels (use "
                                  "cross_entropy)",
                                  config.source, origin));
  }
}

// The samples a synthetic dataset draws (train + test) and their shape, from the config: an error naming
// the key where their product would overflow, rather than a wrapped size.
int64_t synthetic_size(const RunConfig& config, int64_t train, int64_t test, const Shape& shape) {
  int64_t values = 0, per_sample = 1;
  if (__builtin_add_overflow(train, test, &values))
    throw ConfigError(fmt::format("{}: /data/train_samples, /data/test_samples: {} + {} samples overflow a count; ask "
                                  "for fewer",
                                  config.source, train, test));
  const int64_t samples = values;
  for (int64_t dim : shape)
    if (dim <= 0 || __builtin_mul_overflow(per_sample, dim, &per_sample))
      throw ConfigError(fmt::format("{}: /data/input_shape: {} is not a shape of positive extents whose product fits in "
                                    "64 bits",
                                    config.source, shape_str(shape)));
  if (__builtin_mul_overflow(samples, per_sample, &values))
    throw ConfigError(fmt::format("{}: /data: {} samples of shape {} overflow a count; ask for fewer or smaller ones",
                                  config.source, samples, shape_str(shape)));
  return samples;
}

// Runs a synthetic dataset's generation: its own errors (classes out of range, too many draws) come back
// naming the config, and a size the host cannot hold as an out-of-memory error saying what to lower.
template <class Generate>
void generating(const RunConfig& config, const Generate& generate) {
  try {
    generate();
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(fmt::format("{}: /data: the {} dataset does not fit in host memory; lower /data/train_samples, "
                                  "/data/test_samples (or --train-subset, --test-subset, which size synthetic data) or "
                                  "the sample shape",
                                  config.source, config.data.dataset));
  } catch (const ConfigError&) {
    throw;
  } catch (const InvalidArgument& e) {
    throw ConfigError(fmt::format("{}: /data: {}", config.source, e.what()));
  }
}

}  // namespace

RunData load_run_data(const RunConfig& config, const ModelSpec& spec) {
  const DataConfig& d = config.data;
  RunData out;
  if (d.dataset == "fashion-mnist") {
    auto both = d.path.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(d.path);
    out.train = both.train.subset(d.train_subset);
    out.test = both.test.subset(d.test_subset);
  } else if (d.dataset == "synthetic") {
    Shape shape = d.input_shape.empty() ? spec.input_shape() : d.input_shape;
    synthetic_size(config, d.train_samples, std::max<int64_t>(d.test_samples, 1), shape);
    generating(config, [&] {
      out.train = data::synthetic_classification(d.train_samples, shape, d.classes, config.seed).subset(d.train_subset);
      out.test = data::synthetic_classification(std::max<int64_t>(d.test_samples, 1), shape, d.classes, config.seed + 1)
                     .subset(d.test_subset);
    });
  } else if (d.dataset == "synthetic-regression") {
    const Shape& in = spec.input_shape();
    const Shape& out_shape = spec.layers()[spec.output()].output_shape;
    int64_t out_features = d.out_features ? d.out_features : out_shape.back();
    if (in.size() != 1)
      throw ConfigError(fmt::format("{}: /data: synthetic-regression needs a model with a 1-D input, got {}", config.source,
                                    shape_str(in)));
    // Train and test come from one draw (the same hidden A and b), split at train_samples.
    const int64_t samples = synthetic_size(config, d.train_samples, std::max<int64_t>(d.test_samples, 1), in);
    data::Dataset all;
    generating(config, [&] { all = data::synthetic_regression(samples, in[0], out_features, config.seed); });
    out.train = all.subset(d.train_samples).subset(d.train_subset);
    out.test = all;
    int64_t skip = d.train_samples, per_x = all.sample_numel(), per_y = all.target_numel();
    out.test.size = all.size - skip;
    out.test.features.erase(out.test.features.begin(), out.test.features.begin() + skip * per_x);
    out.test.targets.erase(out.test.targets.begin(), out.test.targets.begin() + skip * per_y);
  } else if (d.dataset == "text" && !d.vocabulary_file.empty()) {
    // A trained model's vocabulary without its corpus: no samples to check against the model.
    out.vocabulary = data::Vocabulary::from_json(io::read_file(d.vocabulary_file, kMaxVocabularyFileBytes), d.vocabulary_file);
    return out;
  } else if (d.dataset == "text") {
    data::TextOptions options;
    options.path = d.path;
    options.exclude = d.exclude;
    options.bytes = d.tokenizer == "byte";
    // The context defaults to the model's input length, which it must equal anyway.
    options.context = d.context ? d.context : (spec.input_shape().size() == 1 ? spec.input_shape()[0] : 0);
    options.validation_fraction = d.validation_fraction;
    options.categories = d.categories;
    options.separator = d.separator;
    options.balance = d.balance;
    data::TextCorpus corpus = d.task == "categories" ? data::load_text_categories(options) : data::load_text(options);
    out.train = std::move(corpus.train).subset(d.train_subset);
    out.test = std::move(corpus.validation).subset(d.test_subset);
    out.vocabulary = std::move(corpus.vocabulary);
  } else {
    data::CsvOptions options{d.target_column, d.classification, d.target_columns};
    out.train = data::load_csv(d.train_file, options).subset(d.train_subset);
    out.test = d.test_file.empty() ? out.train : data::load_csv(d.test_file, options).subset(d.test_subset);
  }
  if (!d.mean.empty() || !d.std.empty()) {
    std::vector<double> mean = d.mean.empty() ? std::vector<double>{0.0} : d.mean;
    std::vector<double> std = d.std.empty() ? std::vector<double>{1.0} : d.std;
    try {
      data::normalize(out.train, mean, std);
      data::normalize(out.test, mean, std);
    } catch (const InvalidArgument& e) {
      throw ConfigError(fmt::format("{}: /data/mean, /data/std: {}", config.source, e.what()));
    }
  }
  check_fits(out.train, origin(config, "train"), config, spec);
  check_fits(out.test, origin(config, "test"), config, spec);
  if (out.test.is_classification() != out.train.is_classification() ||
      (!out.train.is_classification() && out.test.target_shape != out.train.target_shape))
    throw ConfigError(fmt::format("{}: the {} has other targets than the {} (class labels and regression targets of "
                                  "one shape cannot mix)",
                                  config.source, origin(config, "test"), origin(config, "train")));
  return out;
}

}  // namespace kestrel
