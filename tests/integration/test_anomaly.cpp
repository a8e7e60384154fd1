// Anomaly detection (--detect-anomaly, "detect_anomaly": true): the first op whose output or gradient
// is NaN or infinite is named with its layer and step, in forward, in backward and in the optimizer's
// update; bad data is told apart from an op that overflowed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "cli_run.h"
#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;
using kestrel::Tensor;
using kestrel::Var;
namespace fn = kestrel::fn;

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

Var scalar(double value, bool requires_grad = true) {
  return Var(Tensor::full({1}, value, kestrel::DType::f32, cpu()), requires_grad);
}

std::string anomaly_of(const std::function<void()>& run) {
  kestrel::AnomalyModeGuard check;
  try {
    run();
  } catch (const kestrel::AnomalyError& e) {
    return e.what();
  }
  return "no anomaly";
}

TEST(Anomaly, ForwardNamesTheOpAndItsLayerOrTheInputFromOutside) {
  kestrel::LayerScope layer("model.json: /layers/2 (linear)");
  const std::string overflow = anomaly_of([] { fn::mul(scalar(1e30), scalar(1e30)); });
  EXPECT_NE(overflow.find("forward: mul in model.json: /layers/2 (linear) gave NaN or infinity"), std::string::npos)
      << overflow;
  EXPECT_NE(overflow.find("from finite inputs"), std::string::npos) << overflow;
  const std::string data = anomaly_of([] { fn::relu(scalar(std::numeric_limits<double>::quiet_NaN(), false)); });
  EXPECT_NE(data.find("forward: input 0 of relu in model.json: /layers/2 (linear) holds NaN or infinity"),
            std::string::npos)
      << data;
  EXPECT_NE(data.find("check the data"), std::string::npos) << data;
  // Off, NaN flows on as in any float arithmetic.
  EXPECT_TRUE(std::isinf(fn::mul(scalar(1e30), scalar(1e30)).value().to_doubles()[0]));
}

TEST(Anomaly, BackwardNamesTheOpWhoseGradientOverflowed) {
  // z = a * b is 1 and the loss 1e10 * z is finite, but dloss/db = 1e10 * a = 1e40 is not.
  Var a = scalar(1e30), b = scalar(1e-30);
  const std::string found = anomaly_of([&] {
    kestrel::LayerScope layer("model.json: /layers/0 (linear)");
    Var z = fn::mul(a, b);
    kestrel::backward(fn::sum(fn::mul(z, scalar(1e10, false))));
  });
  EXPECT_NE(found.find("backward: mul in model.json: /layers/0 (linear) gave NaN or infinity as the gradient of its "
                       "input 1"),
            std::string::npos)
      << found;
}

// A CSV of 16 features and a class, every feature +-3e38 (finite in f32), and a run config training
// `layers` on it.
fs::path huge_values_run(const std::string& name, const std::string& layers, double lr) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_anomaly_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream csv(dir / "huge.csv");
  for (int row = 0; row < 64; ++row) {
    for (int column = 0; column < 16; ++column) csv << ((row * 7 + column * 3) % 5 < 2 ? "-3e38," : "3e38,");
    csv << row % 2 << "\n";
  }
  std::ofstream(dir / "model.json") << R"({"name": "wide", "input": {"shape": [16]}, "layers": [)" + layers + "]}";
  std::ofstream(dir / "run.train.json") << R"({"model": "model.json", "out": "run",
    "data": {"dataset": "csv", "train_file": "huge.csv", "target_column": -1},
    "optimizer": {"type": "sgd", "lr": )" + std::to_string(lr) + R"(}, "batch_size": 32, "epochs": 1,
    "backend": {"preference": ["cpu"]}})";
  return dir / "run.train.json";
}

TEST(Anomaly, TrainingStopsAtTheFirstOverflowingLayerAndStep) {
  // Sums of 16 terms of up to 0.25 x 3e38 overflow in some of the 256 outputs.
  const fs::path config = huge_values_run(
      "forward", R"({"type": "linear", "out_features": 256}, {"type": "relu"}, {"type": "linear", "out_features": 2})", 0.01);
  CliRun found = run_cli("train " + config.string() + " --detect-anomaly --quiet");
  EXPECT_EQ(found.status, 3) << found.output;
  EXPECT_NE(found.output.find("anomaly detection: step 1 (epoch 1, batch 1): forward: linear in " +
                              (config.parent_path() / "model.json").string() + ": /layers/0 (linear) gave NaN or infinity"),
            std::string::npos)
      << found.output;
  // Without it the loss guard stops the run too, but can only name the step.
  CliRun plain = run_cli("train " + config.string() + " --quiet");
  EXPECT_EQ(plain.status, 3) << plain.output;
  EXPECT_NE(plain.output.find("the training loss became NaN or infinite at step 1"), std::string::npos) << plain.output;
}

TEST(Anomaly, TheOptimizersUpdateIsCheckedToo) {
  // Adam with eps 0 divides a zero gradient by its zero root-mean-square: 0 / 0. The first feature
  // column is all zeros here, so its weights get exactly zero gradients. The run config's key this time.
  const fs::path config = huge_values_run("update", R"({"type": "linear", "out_features": 2})", 0.001);
  std::ifstream in(config);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text.replace(text.find(R"({"type": "sgd",)"), 15, R"({"type": "adam", "eps": 0,)");
  std::ofstream(config) << text.substr(0, text.rfind('}')) << R"(, "detect_anomaly": true})";
  std::ifstream data_in(config.parent_path() / "huge.csv");
  std::string csv, line;
  while (std::getline(data_in, line)) csv += "0" + line.substr(line.find(',')) + "\n";
  for (size_t at; (at = csv.find("e38")) != std::string::npos;) csv.replace(at, 3, "");  // +-3
  std::ofstream(config.parent_path() / "huge.csv") << csv;
  CliRun found = run_cli("train " + config.string() + " --quiet");
  EXPECT_EQ(found.status, 3) << found.output;
  EXPECT_NE(found.output.find("step 1 (epoch 1, batch 1): the optimizer's update gave NaN or infinite parameters from "
                              "finite gradients (learning rate 0.001)"),
            std::string::npos)
      << found.output;
}

}  // namespace
