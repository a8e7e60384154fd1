// Gradient accumulation on the CPU backend: k micro-batches per optimizer step train the same model as
// one batch of k times their size (same data order, same loss normalisation, partial last batch
// included), and a split that does not divide the batch is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kestrel/io.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;
const std::string models = std::string(KESTREL_SOURCE_DIR) + "/models/";

kestrel::TrainOptions quiet() {
  kestrel::TrainOptions options;
  options.quiet = true;
  return options;
}

struct Outcome {
  std::vector<float> parameters;
  kestrel::TrainSummary summary;
};

Outcome train(kestrel::RunConfig config, int64_t accumulate_steps, const std::string& name) {
  fs::path out = fs::temp_directory_path() / ("kestrel_accumulation_" + name + std::to_string(accumulate_steps));
  fs::remove_all(out);
  config.accumulate_steps = accumulate_steps;
  config.backends = {"cpu"};
  config.out_dir = out.string();
  kestrel::Trainer trainer(config);
  Outcome outcome{{}, trainer.fit(quiet())};
  outcome.parameters = trainer.model().flat_parameters().to_vector<float>();
  return outcome;
}

// |a - b| / |b| over the whole vector: a few ulps of f32 per sum, not per element, since Adam's
// division can turn a gradient's last-bit difference into a larger relative change of a tiny update.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(difference / norm);
}

void expect_same_training(const Outcome& accumulated, const Outcome& whole, double tolerance) {
  ASSERT_EQ(accumulated.summary.steps, whole.summary.steps);
  ASSERT_EQ(accumulated.parameters.size(), whole.parameters.size());
  EXPECT_NE(accumulated.parameters, std::vector<float>(whole.parameters.size(), 0.0f));
  EXPECT_LE(relative_difference(accumulated.parameters, whole.parameters), tolerance);
  EXPECT_NEAR(accumulated.summary.train_loss, whole.summary.train_loss, tolerance * std::abs(whole.summary.train_loss));
  EXPECT_NEAR(accumulated.summary.test.loss, whole.summary.test.loss, tolerance * std::abs(whole.summary.test.loss));
}

TEST(Accumulation, ConvNetStepsOfFourMicroBatchesEqualWholeBatches) {
  // 1000 samples in batches of 64: 15 full batches (micro-batches of 16) and one of 40 (16 + 16 + 8).
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "small_cnn.train.json");
  config.data.train_samples = 1000;
  config.data.test_samples = 256;
  config.epochs = 1;
  Outcome whole = train(config, 1, "cnn"), accumulated = train(config, 4, "cnn");
  EXPECT_EQ(whole.summary.steps, 16);
  EXPECT_EQ(accumulated.summary.replayed_steps, whole.summary.replayed_steps);  // the k-pass step is captured too
  expect_same_training(accumulated, whole, 1e-6);
  auto summary = nlohmann::json::parse(kestrel::io::read_file(accumulated.summary.out_dir + "/summary.json"));
  EXPECT_EQ(summary["accumulate_steps"], 4);
  EXPECT_EQ(summary["batch_size"], 64);
}

// Plain SGD keeps the parameters a linear function of the summed gradients, so single-sample
// micro-batches are compared over several steps; Adam, whose first steps move every weight by about
// lr whatever the gradient's size, flips the direction of weights whose gradient is rounding noise
// in either run, so it is compared over fewer steps (the language model below).
TEST(Accumulation, SgdOnAnMlpWithEveryMicroBatchASingleSample) {
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "seeds_mlp.train.json");
  config.data.train_samples = 96;
  config.data.test_samples = 64;
  config.batch_size = 32;
  config.epochs = 2;
  config.optimizer.type = kestrel::OptimizerKind::sgd;
  config.optimizer.lr = 0.05;
  expect_same_training(train(config, 32, "mlp"), train(config, 1, "mlp"), 1e-6);
}

TEST(Accumulation, LanguageModelLossOverEveryPosition) {
  // Targets (N, T): each micro-batch's mean over its positions is weighted by its share of samples.
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "lstm_generator.train.json");
  config.data.path = "/usr/share/games/fortunes/linux";
  config.max_steps = 6;
  config.eval_batch_size = 512;
  config.data.test_subset = 512;
  expect_same_training(train(config, 2, "lstm"), train(config, 1, "lstm"), 1e-6);
}

TEST(Accumulation, AMicroBatchCountThatDoesNotDivideTheBatchIsRefusedByName) {
  const std::string source = (fs::temp_directory_path() / "accumulate.train.json").string();
  try {
    kestrel::RunConfig::parse(R"({"model": "m.json", "batch_size": 64, "accumulate_steps": 3})", source);
    FAIL() << "accepted 3 micro-batches of a batch of 64";
  } catch (const kestrel::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(source + ": /accumulate_steps: 3 micro-batches do not divide /batch_size (64)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(kestrel::RunConfig::parse(R"({"model": "m.json", "accumulate_steps": 0})", source), kestrel::ConfigError);
  // A flag can change the batch size after the file was read: the trainer checks again.
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "small_cnn.train.json");
  config.accumulate_steps = 4;
  config.batch_size = 30;
  config.backends = {"cpu"};
  EXPECT_THROW(kestrel::Trainer{config}, kestrel::ConfigError);
}

}  // namespace
