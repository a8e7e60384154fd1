// Training end to end on the CPU backend: resume equivalence, checkpoint faults, and accuracy on a
// Fashion-MNIST subset (the full-size targets are benchmarks, see bench/results/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kestrel/io.h"
#include "kestrel/ops.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;
const std::string models = std::string(KESTREL_SOURCE_DIR) + "/models/";

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kestrel_test_" + name);
  fs::remove_all(dir);
  return dir;
}

kestrel::RunConfig small_mlp_config(const fs::path& out) {
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "fashion_mlp.train.json");
  config.data.train_subset = 1280;  // 20 batches of 64 per epoch
  config.data.test_subset = 500;
  config.epochs = 2;
  config.checkpoint_every = 7;
  config.backends = {"cpu"};
  config.out_dir = out.string();
  return config;
}

std::vector<float> parameters(kestrel::Trainer& trainer) {
  return trainer.model().flat_parameters().to_vector<float>();
}

kestrel::TrainOptions quiet() {
  kestrel::TrainOptions options;
  options.quiet = true;
  return options;
}

// What training `config` to its end changes each parameter by: after - before.
std::vector<double> parameter_change(const kestrel::RunConfig& config) {
  kestrel::Trainer trainer(config);
  const std::vector<float> before = parameters(trainer);
  trainer.fit(quiet());
  const std::vector<float> after = parameters(trainer);
  std::vector<double> change(before.size());
  for (size_t i = 0; i < change.size(); ++i) change[i] = double(after[i]) - double(before[i]);
  return change;
}

TEST(Training, ResumingAKilledRunMatchesAnUninterruptedOneExactly) {
  fs::path straight_dir = fresh_dir("straight"), resumed_dir = fresh_dir("resumed");
  kestrel::Trainer straight(small_mlp_config(straight_dir));
  kestrel::TrainSummary expected = straight.fit(quiet());

  {
    // "Killed" after step 31 (mid-way through epoch 2); its last checkpoint is from step 28.
    kestrel::Trainer interrupted(small_mlp_config(resumed_dir));
    kestrel::TrainOptions options = quiet();
    options.interrupt_after = 31;
    interrupted.fit(options);
    auto state = nlohmann::json::parse(kestrel::io::read_file((resumed_dir / "checkpoint.json").string()));
    ASSERT_EQ(state["step"], 28);
    ASSERT_EQ(state["epoch"], 1);
    ASSERT_EQ(state["batch"], 8);
  }
  kestrel::Trainer resumed(small_mlp_config(resumed_dir));
  kestrel::TrainOptions options = quiet();
  options.resume = true;
  kestrel::TrainSummary got = resumed.fit(options);

  EXPECT_EQ(got.steps, expected.steps);
  EXPECT_EQ(parameters(resumed), parameters(straight));  // bit for bit
  EXPECT_EQ(got.test.loss, expected.test.loss);
  EXPECT_EQ(got.test.accuracy, expected.test.accuracy);
  // The metrics of the redone steps replace the interrupted run's, so the log reads as one run.
  std::ifstream a(straight_dir / "metrics.jsonl"), b(resumed_dir / "metrics.jsonl");
  std::string line_a, line_b;
  int lines = 0;
  while (std::getline(a, line_a) && std::getline(b, line_b)) {
    auto ja = nlohmann::json::parse(line_a), jb = nlohmann::json::parse(line_b);
    EXPECT_EQ(ja["step"], jb["step"]);
    EXPECT_EQ(ja["loss"], jb["loss"]);
    ++lines;
  }
  EXPECT_GT(lines, 2);
  EXPECT_TRUE(fs::exists(resumed_dir / "summary.json"));
  EXPECT_TRUE(fs::exists(resumed_dir / "plot.svg"));
}

TEST(Training, AFreshRunReplacesAnEarlierRunsCheckpointsInItsFolder) {
  const fs::path dir = fresh_dir("fresh_over_old");
  {
    kestrel::Trainer longer(small_mlp_config(dir));  // 40 steps: weights at steps 35 and 40 kept
    longer.fit(quiet());
  }
  kestrel::RunConfig config = small_mlp_config(dir);
  config.max_steps = 5;
  kestrel::Trainer shorter(config);
  kestrel::TrainOptions options = quiet();
  shorter.fit(options);
  // Only this run's weights (step 5) remain: the rotation must not keep the longer run's later files
  // over it, and a resume continues this run.
  std::vector<std::string> weights;
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints")) weights.push_back(entry.path().filename());
  EXPECT_EQ(weights, std::vector<std::string>{"step-000000005.safetensors"});
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    event_files += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(event_files, 1);
  config.max_steps = 8;
  kestrel::Trainer resumed(config);
  options.resume = true;
  EXPECT_EQ(resumed.fit(options).steps, 8);
}

TEST(Training, CorruptOrMismatchedCheckpointsAreRejected) {
  fs::path dir = fresh_dir("corrupt");
  kestrel::RunConfig config = small_mlp_config(dir);
  config.epochs = 1;
  kestrel::Trainer(config).fit(quiet());
  auto state = nlohmann::json::parse(kestrel::io::read_file((dir / "checkpoint.json").string()));
  fs::path weights = dir / state["weights"].get<std::string>();

  // A flipped byte in the weights file.
  std::string bytes = kestrel::io::read_file(weights.string());
  bytes[bytes.size() - 5] ^= 0x40;
  kestrel::io::write_file_atomically(weights.string(), bytes);
  kestrel::TrainOptions options = quiet();
  options.resume = true;
  try {
    kestrel::Trainer(config).fit(options);
    FAIL() << "a corrupt checkpoint was accepted";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("SHA-256"), std::string::npos) << e.what();
  }

  // A checkpoint of another model.
  kestrel::RunConfig other = kestrel::RunConfig::load(models + "seeds_mlp.train.json");
  other.backends = {"cpu"};
  other.data.train_samples = 256;
  other.data.test_samples = 64;
  other.out_dir = dir.string();
  try {
    kestrel::Trainer(other).fit(options);
    FAIL() << "a checkpoint of another model was accepted";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model file"), std::string::npos) << e.what();
  }

  // Garbage in checkpoint.json.
  kestrel::io::write_file_atomically((dir / "checkpoint.json").string(), "{\"format\": ");
  EXPECT_THROW(kestrel::Trainer(config).fit(options), kestrel::InvalidArgument);
}

TEST(Training, FashionMnistMlpLearnsOnASubset) {
  kestrel::RunConfig config = small_mlp_config(fresh_dir("accuracy"));
  config.data.train_subset = 10000;
  config.data.test_subset = 2000;
  config.epochs = 2;
  config.checkpoint_every = 0;
  kestrel::Trainer trainer(config);
  kestrel::TrainSummary summary = trainer.fit(quiet());
  EXPECT_GE(summary.test.accuracy, 0.80) << "test loss " << summary.test.loss;
  // Evaluating the saved checkpoint in a new trainer gives the same figures.
  kestrel::Trainer reloaded(config);
  reloaded.load_weights(config.out_dir + "/checkpoint.json");
  kestrel::EvalResult again = reloaded.evaluate();
  EXPECT_EQ(again.accuracy, summary.test.accuracy);
  auto predictions = reloaded.predict(4);
  ASSERT_EQ(predictions.size(), 4u);
  EXPECT_EQ(predictions[0].top.size(), 3u);
}

TEST(Training, ConvNetLearnsOnASubset) {
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "fashion_convnet.train.json");
  config.data.train_subset = 3200;
  config.data.test_subset = 1000;
  config.epochs = 1;
  config.checkpoint_every = 0;
  config.backends = {"cpu"};
  config.out_dir = fresh_dir("convnet").string();
  kestrel::TrainSummary summary = kestrel::Trainer(config).fit(quiet());
  EXPECT_GE(summary.test.accuracy, 0.65) << "test loss " << summary.test.loss;
}

// optimizer.clip_grad_norm: one SGD step of lr 1 moves the parameters by the clipped gradient, so the
// step's difference is the gradient times min(1, max_norm / (norm + 1e-6)), as clip_grad_norm_ makes it;
// under f16 loss scaling the norm compared is the unscaled one.
TEST(Training, ClippingScalesTheGradientToItsMaximumNorm) {
  auto step_of = [](const std::string& name, double clip, const std::string& precision) {
    kestrel::RunConfig config = small_mlp_config(fresh_dir(name));
    config.optimizer = {};
    config.optimizer.type = kestrel::OptimizerKind::sgd;
    config.optimizer.lr = 1.0;
    config.optimizer.clip_grad_norm = clip;
    config.precision = kestrel::parse_dtype(precision);
    config.loss_scale.init_scale = 256;  // f16: a first step that cannot overflow (it would be skipped)
    config.max_steps = 1;
    config.checkpoint_every = 0;
    return parameter_change(config);  // -lr * the clipped gradient
  };
  auto norm = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x * x;
    return std::sqrt(sum);
  };
  const std::vector<double> plain = step_of("clip_none", 0, "f32");
  const double gradient_norm = norm(plain);
  ASSERT_GT(gradient_norm, 0);
  // Above the norm: nothing changes, bit for bit.
  EXPECT_EQ(step_of("clip_above", 2 * gradient_norm, "f32"), plain);
  // A quarter of it: every element a quarter as large (the parameters' rounding aside).
  const std::vector<double> clipped = step_of("clip_quarter", gradient_norm / 4, "f32");
  const double factor = (gradient_norm / 4) / (gradient_norm + 1e-6);
  double largest = 0;
  for (double x : plain) largest = std::max(largest, std::abs(x));
  for (size_t i = 0; i < plain.size(); ++i)
    ASSERT_NEAR(clipped[i], plain[i] * factor, 1e-5 * largest) << "parameter " << i;
  EXPECT_NEAR(norm(clipped), gradient_norm / 4, 1e-4 * gradient_norm);
  // metrics.jsonl logs the norm before clipping ("grad_norm"), and only when clipping.
  auto logged_norm = [](const std::string& name) {
    std::ifstream in(fs::temp_directory_path() / ("kestrel_test_" + name) / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.value("kind", "") == "train") return record.contains("grad_norm") ? record["grad_norm"].get<double>() : -1.0;
    }
    return -2.0;  // no training record
  };
  EXPECT_NEAR(logged_norm("clip_quarter"), gradient_norm, 1e-4 * gradient_norm);
  EXPECT_EQ(logged_norm("clip_none"), -1.0);
  // Where the update cannot read the clipping's divisor on the device (here: every op composed), the
  // gradients are scaled before it instead, to the same effect.
  const std::vector<double> composed = [&] {
    const kestrel::ops::FusedOpsScope composed_ops(false);
    return step_of("clip_composed", gradient_norm / 4, "f32");
  }();
  EXPECT_NEAR(norm(composed), gradient_norm / 4, 1e-4 * gradient_norm);
  // f16 with loss scaling (256): clipped to a quarter of the f32 norm too, not 256 times less.
  EXPECT_NEAR(norm(step_of("clip_f16", gradient_norm / 4, "f16")), gradient_norm / 4, 2e-2 * gradient_norm);
}

// torch clips the gradients and the optimizer adds its L2 term (weight_decay * p) afterwards, so the
// decay is not divided. The fused update, which reads the clipping's divisor on the device, must keep that
// order. It is compared with the plain update after the gradients are scaled in place (every op
// composed), over three steps of Adam (L2), AdamW and SGD with momentum and L2, on every loaded backend.
// The decay here dominates the clipped gradient, so dividing it too would change the steps many times over.
TEST(Training, ClippingComesBeforeEveryOptimizersWeightDecay) {
  std::vector<std::string> backends;
  for (const auto& plugin : kestrel::Engine::global().plugins())
    if (plugin.loaded && !plugin.devices.empty()) backends.push_back(plugin.name + ":0");
  for (const std::string& backend : backends)
    for (kestrel::OptimizerKind kind : {kestrel::OptimizerKind::adam, kestrel::OptimizerKind::adamw,
                                        kestrel::OptimizerKind::sgd}) {
      const std::string name = kestrel::optimizer_kind_names[int(kind)];
      SCOPED_TRACE(backend + " " + name);
      auto steps_of = [&](bool fused, double clip) {
        kestrel::RunConfig config = small_mlp_config(fresh_dir("clip_decay_" + name));
        config.backends = {backend};
        config.fallback = "error";
        config.optimizer = {};
        config.optimizer.type = kind;
        config.optimizer.lr = kind == kestrel::OptimizerKind::sgd ? 0.1 : 1e-2;
        config.optimizer.weight_decay = 0.5;
        config.optimizer.momentum = kind == kestrel::OptimizerKind::sgd ? 0.9 : 0.0;
        // Above the clipped gradient's elements, so Adam's steps follow the gradient's size instead of
        // its sign, and elements near 0 do not turn the composed forward's rounding into large steps.
        config.optimizer.eps = 1e-4;
        config.optimizer.clip_grad_norm = clip;
        config.max_steps = 3;
        config.checkpoint_every = 0;
        const kestrel::ops::FusedOpsScope fused_ops(fused);
        return parameter_change(config);
      };
      auto largest_difference = [](const std::vector<double>& a, const std::vector<double>& b) {
        double largest = 0;
        for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(a[i] - b[i]));
        return largest;
      };
      const std::vector<double> fused = steps_of(true, 1e-3), composed = steps_of(false, 1e-3),
                                unclipped = steps_of(true, 0);
      const std::vector<double> none(fused.size(), 0.0);
      const double size = largest_difference(composed, none);
      ASSERT_GT(size, 0);
      EXPECT_GT(largest_difference(unclipped, composed), 1e-2 * size);  // the clipping mattered
      EXPECT_LE(largest_difference(fused, composed), 1e-4 * size);
    }
}

TEST(Training, LinearRegressionFitsItsData) {
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "linear_regression.train.json");
  config.backends = {"cpu"};
  config.out_dir = fresh_dir("regression").string();
  kestrel::TrainSummary summary = kestrel::Trainer(config).fit(quiet());
  EXPECT_LT(summary.test.loss, 1e-3);  // the targets carry noise of variance 1e-4
  EXPECT_TRUE(std::isnan(summary.test.accuracy));
}

TEST(Training, CsvDataThroughARunConfig) {
  // Two Gaussian blobs in a CSV file, a linear classifier, a config that names both.
  fs::path dir = fresh_dir("csv");
  fs::create_directories(dir);
  std::ofstream csv(dir / "blobs.csv");
  csv << "x,y,label\n";
  for (int i = 0; i < 400; ++i) {
    int label = i % 2;
    double angle = i * 0.7, radius = 0.3 * (i % 7) / 7.0;
    csv << (label ? 1.0 : -1.0) + radius * std::cos(angle) << "," << (label ? 1.0 : -1.0) + radius * std::sin(angle)
        << "," << label << "\n";
  }
  csv.close();
  std::ofstream(dir / "classifier.json") << R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 2}]})";
  std::ofstream(dir / "blobs.train.json") << R"({"model": "classifier.json", "out": "run",
    "data": {"dataset": "csv", "train_file": "blobs.csv", "target_column": -1},
    "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9}, "batch_size": 32, "epochs": 3,
    "backend": {"preference": ["cpu"]}})";
  kestrel::RunConfig config = kestrel::RunConfig::load((dir / "blobs.train.json").string());
  EXPECT_EQ(config.out_dir, (dir / "run").string());
  kestrel::TrainSummary summary = kestrel::Trainer(config).fit(quiet());
  EXPECT_GE(summary.test.accuracy, 0.99);
}

}  // namespace
