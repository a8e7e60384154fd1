// Activation checkpointing: a checkpointed segment gives bit-identical gradients (dropout masks drawn
// again from the same counters, running statistics moved once), keeps fewer activations, trains a run
// bit for bit as without it (captured steps included), and bad marks are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/io.h"
#include "kestrel/model.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;
using kestrel::Tensor;
using kestrel::Var;

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

struct StepResult {
  std::vector<float> gradients;
  std::vector<std::vector<float>> buffers;  // running statistics after the step
  uint64_t rng_offset = 0;
  double loss = 0;
  uint64_t peak_bytes = 0;  // the device's peak allocation during forward and backward
};

// One training forward and backward of `spec` on `inputs`, from the same initial weights (seed 7).
StepResult step(kestrel::ModelSpec spec, const Tensor& inputs, const Tensor& labels) {
  kestrel::Model model(std::move(spec), cpu(), 7);
  model.zero_grad();
  kestrel::Engine::global().reset_peak_memory_stats(cpu());
  const uint64_t before = kestrel::Engine::global().memory_stats(cpu()).allocated;
  StepResult result;
  {
    Var loss = kestrel::fn::cross_entropy(model.forward(inputs, true, 11, result.rng_offset), labels);
    kestrel::backward(loss);
    result.loss = loss.value().to_doubles()[0];
  }
  result.peak_bytes = kestrel::Engine::global().memory_stats(cpu()).peak_allocated - before;
  result.gradients = model.flat_gradients().to_vector<float>();
  for (auto& [name, buffer] : model.buffers()) result.buffers.push_back(buffer.to_vector<float>());
  return result;
}

Tensor random_inputs(const kestrel::Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<double> values(count);
  for (double& v : values) v = dist(rng);
  return Tensor::from_vector(values, shape, cpu()).to(kestrel::DType::f32);
}

Tensor random_labels(int64_t count, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> labels(count);
  for (double& label : labels) label = double(rng() % classes);
  return Tensor::from_vector(labels, {count}, cpu()).to(kestrel::DType::i64);
}

void expect_identical(const StepResult& checkpointed, const StepResult& plain) {
  EXPECT_EQ(checkpointed.gradients, plain.gradients);  // bit for bit
  EXPECT_EQ(checkpointed.buffers, plain.buffers);
  EXPECT_EQ(checkpointed.rng_offset, plain.rng_offset);
  EXPECT_EQ(checkpointed.loss, plain.loss);
}

// A deep MLP with dropout; `mark(i)` gives layer i's checkpoint key ("" for none).
std::string deep_mlp(int blocks, int width, const std::function<std::string(int)>& mark) {
  std::string layers;
  for (int b = 0; b < blocks; ++b) {
    std::string key = mark(b).empty() ? "" : R"(, "checkpoint": )" + mark(b);
    layers += R"({"type": "linear", "out_features": )" + std::to_string(width) + key + "}, " + R"({"type": "relu")" +
              key + "}, " + R"({"type": "dropout", "p": 0.1)" + key + "}, ";
  }
  return R"({"name": "deep", "input": {"shape": [64]}, "layers": [)" + layers +
         R"({"type": "linear", "out_features": 10}]})";
}

TEST(ActivationCheckpointing, DeepMlpSegmentsGiveTheSameGradientsFromFewerActivations) {
  const int blocks = 16, width = 512;
  const Tensor inputs = random_inputs({256, 64}, 1), labels = random_labels(256, 10, 2);
  // Segments of four blocks: only every fourth block's input is kept.
  auto grouped = [](int b) { return "\"s" + std::to_string(b / 4) + "\""; };
  StepResult plain = step(kestrel::ModelSpec::parse(deep_mlp(blocks, width, [](int) { return ""; }), "deep.json"),
                          inputs, labels);
  StepResult checkpointed = step(kestrel::ModelSpec::parse(deep_mlp(blocks, width, grouped), "deep.json"), inputs, labels);
  expect_identical(checkpointed, plain);
  // Kept without: a linear output, a relu output and a dropout mask and output per block (~4 x 512 KiB
  // x 16); with: 4 segment inputs plus one segment's activations while it runs again.
  EXPECT_LT(checkpointed.peak_bytes * 2, plain.peak_bytes)
      << checkpointed.peak_bytes << " vs " << plain.peak_bytes << " bytes";
}

TEST(ActivationCheckpointing, ResidualBlockWithBatchNormMovesRunningStatisticsOnce) {
  const std::string text = kestrel::io::read_file(std::string(KESTREL_SOURCE_DIR) + "/models/residual_cnn.json");
  kestrel::ModelSpec plain_spec = kestrel::ModelSpec::parse(text, "residual_cnn.json");
  // The block reads stem_relu twice (its first convolution and the residual add): one segment input.
  std::string marked = text;
  for (const char* node : {"block_conv1", "block_bn1", "block_relu", "block_conv2", "block_bn2", "residual", "block_out"}) {
    const std::string name = std::string("\"name\": \"") + node + "\"";
    marked.replace(marked.find(name), name.size(), name + R"(, "checkpoint": "block")");
  }
  kestrel::ModelSpec marked_spec = kestrel::ModelSpec::parse(marked, "residual_cnn.json");
  ASSERT_EQ(marked_spec.checkpoint_segments().size(), 1u);
  EXPECT_EQ(marked_spec.checkpoint_segments()[0].first, 3);
  EXPECT_EQ(marked_spec.checkpoint_segments()[0].last, 9);
  const Tensor inputs = random_inputs({8, 1, 28, 28}, 3), labels = random_labels(8, 10, 4);
  expect_identical(step(marked_spec, inputs, labels), step(plain_spec, inputs, labels));
}

TEST(ActivationCheckpointing, TransformerAndLstmLayersByType) {
  const std::string text = R"({"name": "seq", "input": {"shape": [12], "dtype": "i64"}, "layers": [
    {"type": "embedding", "num_embeddings": 20, "embedding_dim": 16},
    {"type": "positional_embedding", "max_len": 12, "embedding_dim": 16},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 2, "dim_feedforward": 32, "dropout": 0.2,
     "norm_first": true, "causal": true},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 2, "dim_feedforward": 32, "dropout": 0.2},
    {"type": "lstm", "hidden_size": 16, "num_layers": 2, "dropout": 0.3},
    {"type": "last_step"}, {"type": "linear", "out_features": 5}]})";
  kestrel::ModelSpec plain_spec = kestrel::ModelSpec::parse(text, "seq.json");
  kestrel::ModelSpec marked_spec = kestrel::ModelSpec::parse(text, "seq.json");
  EXPECT_TRUE(marked_spec.checkpoint_layers({"transformer_encoder_layer", "4"}).empty());
  ASSERT_EQ(marked_spec.checkpoint_segments().size(), 3u);  // each layer a segment of its own
  std::vector<double> tokens(6 * 12);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = double((i * 7) % 20);
  const Tensor inputs = Tensor::from_vector(tokens, {6, 12}, cpu()).to(kestrel::DType::i64);
  const Tensor labels = random_labels(6, 5, 5);
  StepResult checkpointed = step(marked_spec, inputs, labels), plain = step(plain_spec, inputs, labels);
  EXPECT_GT(plain.rng_offset, 0u);  // dropout drew masks, and drew them again alike
  expect_identical(checkpointed, plain);
}

TEST(ActivationCheckpointing, ATrainingRunIsBitIdenticalCapturedOrNot) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_activation_checkpointing";
  fs::remove_all(dir);
  fs::create_directories(dir);
  kestrel::io::write_file_atomically((dir / "plain.json").string(), deep_mlp(4, 64, [](int) { return ""; }));
  kestrel::io::write_file_atomically((dir / "marked.json").string(),
                                     deep_mlp(4, 64, [](int b) { return b % 2 ? "true" : ""; }));
  auto run = [&](const std::string& model, const std::vector<std::string>& checkpointing, bool capture) {
    kestrel::RunConfig config = kestrel::RunConfig::parse(R"({"model": ")" + model + R"(",
      "data": {"dataset": "synthetic", "input_shape": [64], "train_samples": 320, "test_samples": 64, "classes": 10},
      "optimizer": {"type": "adam", "lr": 0.001}, "batch_size": 32, "epochs": 2, "backend": {"preference": ["cpu"]}})",
                                                          (dir / "run.train.json").string());
    config.activation_checkpointing = checkpointing;
    config.capture = capture;
    config.out_dir = (dir / "run").string();
    fs::remove_all(config.out_dir);
    kestrel::Trainer trainer(config);
    kestrel::TrainOptions options;
    options.quiet = true;
    trainer.fit(options);
    return trainer.model().flat_parameters().to_vector<float>();
  };
  // The marked file checkpoints blocks 1 and 3 layer by layer; the run config adds the other blocks'
  // linear and dropout layers.
  const std::vector<float> plain = run("plain.json", {}, true);
  EXPECT_EQ(run("marked.json", {"linear", "dropout"}, true), plain);
  EXPECT_EQ(run("marked.json", {}, false), plain);
}

TEST(ActivationCheckpointing, BadMarksAreRefusedByName) {
  auto error = [](const std::string& text) {
    try {
      kestrel::ModelSpec::parse(text, "bad.json");
    } catch (const kestrel::ModelError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string head = R"({"input": {"shape": [4]}, "layers": [)";
  EXPECT_NE(error(head + R"({"type": "linear", "out_features": 4, "checkpoint": 3}]})")
                .find("bad.json: /layers/0/checkpoint: expected true (checkpoint this layer) or the name of a segment"),
            std::string::npos);
  EXPECT_NE(error(head + R"({"type": "linear", "out_features": 4, "checkpoint": "a"}, {"type": "relu"},
                            {"type": "linear", "out_features": 4, "checkpoint": "a"}]})")
                .find("bad.json: /layers/2/checkpoint: segment 'a' ended at /layers/0; a segment is consecutive layers"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": {"shape": [4]}, "nodes": [
      {"name": "a", "type": "linear", "inputs": ["input"], "out_features": 4, "checkpoint": "s"},
      {"name": "b", "type": "relu", "inputs": ["a"], "checkpoint": "s"},
      {"name": "c", "type": "add", "inputs": ["a", "b"]}]})")
                .find("bad.json: /nodes/0/checkpoint: the output of a (linear) is read by /nodes/2, outside its "
                      "checkpoint segment (/nodes/0 to /nodes/1)"),
            std::string::npos);
  kestrel::RunConfig config = kestrel::RunConfig::load(std::string(KESTREL_SOURCE_DIR) + "/models/small_cnn.train.json");
  config.activation_checkpointing = {"conv2d", "lstm"};
  config.backends = {"cpu"};
  try {
    kestrel::Trainer trainer(config);
    FAIL() << "accepted a layer type the model lacks";
  } catch (const kestrel::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/activation_checkpointing: 'lstm' is neither the name nor the type of a layer"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
