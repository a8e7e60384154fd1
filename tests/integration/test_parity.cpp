// Cross-backend parity: the same JSON model and seed for K steps on every loaded backend device gives
// the same loss curve as cpu:0, dropout masks are bit-identical, and a checkpoint trained on one device
// evaluates to the same accuracy on every other. The host is shown as two CPU devices so the
// multi-device paths run even where CI has no other backend; every other loaded plugin joins in.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kestrel/ops.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> devices() {
  static bool once = (setenv("KESTREL_CPU_DEVICES", "2", 0), true);
  (void)once;
  std::vector<std::string> out;
  for (const auto& plugin : kestrel::Engine::global().plugins())
    if (plugin.loaded)
      for (const auto& d : plugin.devices) out.push_back(fmt::format("{}:{}", plugin.name, d.index));
  return out;
}

kestrel::RunConfig config_on(const std::string& device, const std::string& out) {
  kestrel::RunConfig config = kestrel::RunConfig::load(std::string(KESTREL_SOURCE_DIR) + "/models/fashion_mlp.train.json");
  config.data.train_subset = 640;
  config.data.test_subset = 300;
  config.epochs = 1;
  config.log_every = 1;  // one metrics record per step: the loss curve
  config.backends = {device};
  config.fallback = "error";
  config.out_dir = out;
  return config;
}

std::vector<double> loss_curve(const std::string& out) {
  std::vector<double> losses;
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

kestrel::TrainOptions quiet() {
  kestrel::TrainOptions o;
  o.quiet = true;
  return o;
}

TEST(Parity, LossCurvesMatchTheCpuReference) {
  auto all = devices();
  ASSERT_GE(all.size(), 2u);
  std::string base = (fs::temp_directory_path() / "kestrel_parity_").string();
  kestrel::Trainer(config_on("cpu:0", base + "cpu_0")).fit(quiet());
  std::vector<double> reference = loss_curve(base + "cpu_0");
  ASSERT_EQ(reference.size(), 10u);
  for (const std::string& device : all) {
    if (device == "cpu:0") continue;
    std::string out = base + device.substr(0, device.find(':')) + "_" + device.substr(device.find(':') + 1);
    kestrel::Trainer(config_on(device, out)).fit(quiet());
    std::vector<double> curve = loss_curve(out);
    ASSERT_EQ(curve.size(), reference.size()) << device;
    // f32 on every backend: sums run in different orders, so allow 1e-3 relative after 10 Adam steps.
    for (size_t i = 0; i < curve.size(); ++i)
      EXPECT_NEAR(curve[i], reference[i], 1e-3 * std::abs(reference[i])) << device << " step " << i + 1;
    fmt::print("[ parity ] {}: {} steps match cpu:0 (first loss {:.6f}, last {:.6f})\n", device, curve.size(), curve.front(),
               curve.back());
  }
}

TEST(Parity, DropoutMasksAreBitIdentical) {
  std::vector<float> reference;
  for (const std::string& name : devices()) {
    kestrel::Device device = kestrel::Engine::global().device(name);
    kestrel::Tensor mask = kestrel::Tensor::empty({4099}, kestrel::DType::f32, device);
    kestrel::ops::random_(mask, KESTREL_DISTRIBUTION_BERNOULLI, 1234, 77, 0.8, 0);
    std::vector<float> bits = mask.to_vector<float>();
    if (reference.empty())
      reference = bits;
    else
      EXPECT_EQ(bits, reference) << name;
  }
}

TEST(Parity, ACheckpointEvaluatesTheSameOnEveryDevice) {
  std::string out = (fs::temp_directory_path() / "kestrel_interchange").string();
  kestrel::Trainer trained(config_on("cpu:0", out));
  kestrel::TrainSummary summary = trained.fit(quiet());
  for (const std::string& device : devices()) {
    kestrel::Trainer other(config_on(device, out + "_eval"));
    other.load_weights(out + "/checkpoint.json");
    kestrel::EvalResult result = other.evaluate();
    // Identical weights and data: at most one borderline sample may flip between backends.
    EXPECT_NEAR(result.accuracy, summary.test.accuracy, 1.0 / 300 + 1e-9) << device;
    EXPECT_NEAR(result.loss, summary.test.loss, 1e-4 * summary.test.loss) << device;
  }
}

}  // namespace
