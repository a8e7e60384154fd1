// The model workflow as a user meets it: every shipped model checks and trains, and bad input gets a
// clear error (file, JSON path, what to do) with exit status 2 — never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "kestrel/engine.h"

namespace {

namespace fs = std::filesystem;

CliRun run(const std::string& args) { return run_cli(args); }

const fs::path models = fs::path(KESTREL_SOURCE_DIR) / "models";

fs::path write_temp(const std::string& name, const std::string& text) {
  fs::path dir = fs::temp_directory_path() / "kestrel_cli_models";
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

TEST(CliModels, EveryShippedModelChecks) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(models)) {
    std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name.find(".train.") != std::string::npos) continue;
    CliRun r = run("check " + entry.path().string());
    EXPECT_EQ(r.status, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("Total parameters"), std::string::npos) << r.output;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// A sequence model's layers: token ids embedded, normalised per position, a linear layer over the last
// axis of (N, T, features).
TEST(CliModels, SequenceLayersCheck) {
  fs::path file = write_temp("sequence.json", R"({"input": {"shape": [7], "dtype": "i64"}, "layers": [
      {"type": "embedding", "num_embeddings": 50, "embedding_dim": 16, "padding_idx": 0},
      {"type": "layernorm", "normalized_shape": 16}, {"type": "linear", "out_features": 50}]})");
  CliRun r = run("check " + file.string());
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* expected : {"(N, 7, 16)", "(N, 7, 50)", "Total parameters: 1682"})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
}

TEST(CliModels, EveryShippedRunConfigTrains) {
  int trained = 0;
  for (const auto& entry : fs::directory_iterator(models)) {
    std::string name = entry.path().filename().string();
    if (name.find(".train.json") == std::string::npos) continue;
    fs::path out = fs::temp_directory_path() / ("kestrel_cli_train_" + name);
    fs::remove_all(out);
    CliRun r = run("train " + entry.path().string() + " --backend cpu --max-steps 3 --epochs 2 --train-subset 256 --test-subset 128 "
                   "--no-progress --out " + out.string());
    EXPECT_EQ(r.status, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("final: 3 steps on cpu:0"), std::string::npos) << name << "\n" << r.output;
    EXPECT_TRUE(fs::exists(out / "summary.json")) << name;
    EXPECT_TRUE(fs::exists(out / "metrics.jsonl")) << name;
    EXPECT_TRUE(fs::exists(out / "checkpoint.json")) << name;
    ++trained;
  }
  EXPECT_GE(trained, 5);
}

TEST(CliModels, EvalAndPredictUseACheckpoint) {
  fs::path out = fs::temp_directory_path() / "kestrel_cli_eval";
  fs::remove_all(out);
  std::string config = (models / "fashion_mlp.train.json").string();
  std::string subsets = " --train-subset 640 --test-subset 200 --backend cpu";
  ASSERT_EQ(run("train " + config + subsets + " --epochs 1 --quiet --out " + out.string()).status, 0);
  CliRun eval = run("eval " + config + subsets + " --checkpoint " + out.string());
  EXPECT_EQ(eval.status, 0) << eval.output;
  EXPECT_NE(eval.output.find("200 test samples"), std::string::npos) << eval.output;
  CliRun predict = run("predict " + config + subsets + " --count 3 --checkpoint " + (out / "checkpoint.json").string());
  EXPECT_EQ(predict.status, 0) << predict.output;
  EXPECT_NE(predict.output.find("sample 2: true"), std::string::npos) << predict.output;
}

// --max-steps caps a run at the epochs' steps rather than adding epochs: a run asking for more hears so.
TEST(CliModels, MaxStepsBeyondTheEpochsIsSaid) {
  fs::path out = fs::temp_directory_path() / "kestrel_cli_max_steps";
  fs::remove_all(out);
  CliRun r = run("train " + (models / "fashion_mlp.train.json").string() + " --backend cpu --train-subset 128 "
                 "--test-subset 64 --batch-size 64 --epochs 1 --max-steps 5 --no-progress --out " + out.string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("max_steps 5 is more than the 2 steps of 1 epoch(s) of 2 batches"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("final: 2 steps on cpu:0"), std::string::npos) << r.output;
}

struct BadModel {
  std::string name, text;
  std::string expected;  // part of the message
};

TEST(CliModels, BadModelFilesGetPathQualifiedErrors) {
  const BadModel cases[] = {
      {"malformed.json", "{\"input\": {\"shape\": [4]},\n \"layers\": [ {\"type\": \"linear\" ", "invalid JSON at line 2"},
      {"unknown_layer.json", R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3}, {"type": "lineer"}]})",
       "/layers/1/type: unknown layer type 'lineer'"},
      {"unknown_arg.json", R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3, "outputs": 2}]})",
       "/layers/0/outputs: unknown argument 'outputs' for linear; valid arguments: out_features, bias"},
      {"wrong_type.json", R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": "ten"}]})",
       "/layers/0/out_features: linear expects an integer from 1 to 2147483647, got \"ten\""},
      // Integers are range-checked before they narrow to the ops' int32 (2^32 used to become 0).
      {"huge_stride.json",
       R"({"input": {"shape": [1, 8, 8]}, "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "stride": 4294967296}]})",
       "/layers/0/stride: conv2d expects an integer from 1 to 2147483647 or a pair [h, w] of them, got 4294967296"},
      {"huge_kernel.json",
       R"({"input": {"shape": [1, 8, 8]}, "layers": [{"type": "maxpool2d", "kernel_size": [2, 4294967299]}]})",
       "/layers/0/kernel_size: maxpool2d expects an integer from 1 to 2147483647"},
      {"unsigned_huge.json", R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 18446744073709551615}]})",
       "/layers/0/out_features: linear expects an integer from 1 to 2147483647"},
      {"dropout_one.json", R"({"input": {"shape": [4]}, "layers": [{"type": "dropout", "p": 1}]})",
       "/layers/0/p: dropout expects a number in [0, 1), got 1"},
      {"missing_arg.json", R"({"input": {"shape": [4]}, "layers": [{"type": "conv2d", "out_channels": 3}]})",
       "/layers/0/kernel_size: conv2d needs 'kernel_size'"},
      {"needs_flatten.json",
       R"({"input": {"shape": [3, 14, 14]}, "layers": [{"type": "conv2d", "out_channels": 16, "kernel_size": 3, "padding": 1}, {"type": "linear", "out_features": 10}]})",
       "/layers/1: linear expects a rank-2 input (N, features) or a rank-3 sequence (N, T, features), got (N, 16, 14, 14); add a flatten layer"},
      {"too_small.json", R"({"input": {"shape": [1, 4, 4]}, "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 5}]})",
       "does not fit the 4x4 input"},
      // Shorter than the kernel by less than the stride: the output extent's division must floor, not
      // truncate toward zero (which made it 1), as torch refuses it.
      {"too_small_strided.json",
       R"({"input": {"shape": [1, 2, 2]}, "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "stride": 2}]})",
       "does not fit the 2x2 input"},
      {"bad_input.json", R"({"input": {"shape": [0]}, "layers": [{"type": "relu"}]})", "/input/shape/0: expected a positive integer"},
      {"bad_dtype.json", R"({"input": {"shape": [4], "dtype": "f16"}, "layers": [{"type": "relu"}]})",
       "/input/dtype: expected \"f32\" (values) or \"i64\" (token ids), got \"f16\""},
      {"duplicate_key.json", R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3, "out_features": 9}]})",
       "/layers/0: the key 'out_features' appears twice in one object"},
      {"nested_deep.json", "{\"input\": {\"shape\": [4]},\n \"layers\": " + std::string(5000, '[') + std::string(5000, ']') + "}",
       "invalid JSON at line 2, column 75: nested deeper than 64 levels"},
      {"number_overflow.json", R"({"input": {"shape": [1e999]}, "layers": [{"type": "relu"}]})",
       "invalid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'"},
      {"embedding_of_values.json",
       R"({"input": {"shape": [7]}, "layers": [{"type": "embedding", "num_embeddings": 5, "embedding_dim": 4}]})",
       "/layers/0: embedding reads i64 token ids, but its input 0 holds f32 values; give it the model's i64 input"},
      {"padding_outside.json",
       R"({"input": {"shape": [7], "dtype": "i64"}, "layers": [{"type": "embedding", "num_embeddings": 5, "embedding_dim": 4, "padding_idx": 5}]})",
       "embedding: padding_idx 5 is not a row of its 5 embeddings"},
      {"layernorm_width.json",
       R"({"input": {"shape": [4]}, "layers": [{"type": "layernorm", "normalized_shape": 8}]})",
       "/layers/0: layernorm normalises a last axis of 8 features, but its input is (N, 4)"},
      // Found by fuzzing: flatten multiplied these sizes past int64. Every declared or inferred shape and
      // every parameter is held to 2^40 elements.
      {"huge_input.json", R"({"input": {"shape": [1, 2429068000000000008, 68]}, "layers": [{"type": "flatten"}]})",
       "/input/shape: [1,2429068000000000008,68] holds more than 2^40 elements per sample"},
      {"huge_output.json",
       R"({"input": {"shape": [1000], "dtype": "i64"}, "layers": [{"type": "embedding", "num_embeddings": 2, "embedding_dim": 2147483647}]})",
       "/layers/0: embedding gives (N, 1000, 2147483647): an empty axis, or more than 2^40 elements per sample"},
      {"huge_weight.json", R"({"input": {"shape": [1000]}, "layers": [{"type": "linear", "out_features": 2147483647}]})",
       "/layers/0: linear's weight would be (2147483647, 1000): an empty axis, or more than 2^40 elements"},
      // Found by review (2026-11-27): each was accepted, with negative shapes or a model mixing its batch.
      {"add_ranks.json", R"({"input": {"shape": [1, 4]}, "nodes": [{"name": "a", "type": "mean_over_time", "inputs": ["input"]},
         {"name": "b", "type": "add", "inputs": ["input", "a"]}]})",
       "/nodes/1: add: inputs (N, 1, 4) and (N, 4) have different ranks"},
      {"padding_row.json", R"({"input": {"shape": [4], "dtype": "i64"}, "layers": [{"type": "embedding", "num_embeddings": 10,
         "embedding_dim": 3, "padding_idx": -11}]})",
       "/layers/0: embedding: padding_idx -11 is not a row of its 10 embeddings (give one in [-10, 10)"},
      {"mask_source.json", R"({"input": {"shape": [6], "dtype": "i64"}, "nodes": [
         {"name": "embed", "type": "embedding", "num_embeddings": 10, "embedding_dim": 1, "inputs": ["input"]},
         {"name": "values", "type": "flatten", "inputs": ["embed"]},
         {"name": "attend", "type": "multihead_attention", "embed_dim": 1, "num_heads": 1, "inputs": ["embed", "values"]}]})",
       "/nodes/2/inputs/1: multihead_attention's input 1 is a key-padding mask: name a key_padding_mask layer of the "
       "tokens, not 'values' (flatten)"},
      {"rank9.json", R"({"input": {"shape": [1, 1, 1, 1, 1, 1, 1, 2]}, "layers": [{"type": "relu"}]})",
       "/input/shape: [1,1,1,1,1,1,1,2] has 8 axes, 9 with the batch's: tensors have at most 8"},
      {"sinusoids.json", R"({"input": {"shape": [16, 1048576]}, "layers": [{"type": "positional_encoding",
         "max_len": 2147483647}]})",
       "/layers/0: positional_encoding: a table of max_len 2147483647 x 1048576 features is more than 2^40 values"},
      {"bad_graph.json", R"({"input": {"shape": [4]}, "nodes": [{"name": "a", "type": "add", "inputs": ["input", "b"]}]})",
       "/nodes/0/inputs/1: \"b\" is not \"input\" or the name of an earlier node"},
  };
  std::string many_layers = R"({"input": {"shape": [4]}, "layers": [)";
  for (int i = 0; i < 100001; ++i) many_layers += R"({"type": "relu"},)";
  many_layers.back() = ']';
  many_layers += "}";
  std::vector<BadModel> all(std::begin(cases), std::end(cases));
  all.push_back({"many_layers.json", many_layers, "/layers: 100001 layers; a model may have at most 100000"});
  for (const auto& c : all) {
    fs::path file = write_temp(c.name, c.text);
    CliRun r = run("check " + file.string());
    EXPECT_EQ(r.status, 2) << c.name << "\n" << r.output;
    EXPECT_NE(r.output.find(file.string()), std::string::npos) << "the message must name the file: " << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.name << "\n" << r.output;
  }
  CliRun missing = run("check /nonexistent/model.json");
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/model.json"), std::string::npos) << missing.output;
}

// The published schema is what the engine generates from its registry of layer kinds, so the two cannot
// drift apart (regenerate with `build/bin/kestrel schema > models/schema/model.schema.json`).
TEST(CliModels, ThePublishedSchemaIsTheGeneratedOne) {
  CliRun r = run("schema");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream file(std::string(KESTREL_SOURCE_DIR) + "/models/schema/model.schema.json");
  const nlohmann::json published = nlohmann::json::parse(file);
  EXPECT_EQ(nlohmann::json::parse(r.output), published)
      << "models/schema/model.schema.json differs from `kestrel schema`; regenerate it";
}

TEST(CliModels, BadRunConfigsAndFlagsGetClearErrors) {
  std::string model = (models / "seeds_mlp.json").string();
  fs::path bad_optimizer = write_temp(
      "bad_optimizer.train.json", R"({"model": ")" + model + R"(", "data": {"dataset": "synthetic"}, "optimizer": {"type": "adagrad"}})");
  CliRun r = run("train " + bad_optimizer.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("/optimizer/type: expected one of sgd, adam, adamw, got \"adagrad\""), std::string::npos) << r.output;

  fs::path typo = write_temp("typo.train.json", R"({"model": ")" + model + R"(", "bacth_size": 32})");
  r = run("train " + typo.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("/bacth_size: unknown key"), std::string::npos) << r.output;

  fs::path wrong_data = write_temp(
      "wrong_data.train.json", R"({"model": ")" + model + R"(", "data": {"dataset": "fashion-mnist"}})");
  r = run("train " + wrong_data.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("the fashion-mnist train data has samples (1, 28, 28) but the model"), std::string::npos) << r.output;

  r = run("train " + (models / "seeds_mlp.train.json").string() + " --backend nosuchbackend");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no 'nosuchbackend' backend plugin was found"), std::string::npos) << r.output;

  // "auto" picks the highest-priority backend: the engine's best device (the CPU without a GPU, never
  // the software Vulkan device; cuda:0 on an NVIDIA machine).
  r = run("train " + (models / "seeds_mlp.train.json").string() + " --backend auto --max-steps 1 --train-subset 128 "
          "--test-subset 64 --quiet --out " + (fs::temp_directory_path() / "kestrel_cli_auto").string());
  EXPECT_EQ(r.status, 0) << r.output;
  const std::string best = kestrel::Engine().best_device().str();
  EXPECT_NE(r.output.find("on " + best), std::string::npos) << r.output;
  if (best.rfind("vulkan", 0) == 0) ADD_FAILURE() << "auto preferred Vulkan over the CPU";

  // Numeric flags are read exactly, in the range the run config allows, or refused naming the flag.
  const std::pair<const char*, const char*> bad_flags[] = {
      {"--epochs -3", "--epochs: expected an integer >= 1, got '-3'"},
      {"--seed 18446744073709551616", "--seed: expected an integer >= 0, got '18446744073709551616'"},
      {"--batch-size 12abc", "--batch-size: expected an integer >= 1, got '12abc'"},
      {"--lr nan", "--lr: expected a finite number in [0, 10], got 'nan'"},
      {"--lr 1e30", "--lr: expected a finite number in [0, 10], got '1e30'"},
      {"--epochs 9223372036854775807 --train-subset 256",
       "epochs (9223372036854775807) x 2 batches per epoch is more steps than a run can count"},
      {"--backend cpu:99999999999", "device 'cpu:99999999999': expected BACKEND or BACKEND:INDEX"},
  };
  for (const auto& [flags, expected] : bad_flags) {
    r = run("train " + (models / "seeds_mlp.train.json").string() + " --quiet --out " +
            (fs::temp_directory_path() / "kestrel_cli_flags").string() + " " + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
  }

  // A diverging run stops with status 3, naming the step.
  fs::path diverging = write_temp("diverging.train.json", R"({"model": ")" + (models / "linear_regression.json").string() +
                                                              R"(", "data": {"dataset": "synthetic-regression"},
      "loss": "mse", "optimizer": {"type": "sgd", "lr": 10}, "batch_size": 32, "epochs": 3})");
  r = run("train " + diverging.string() + " --quiet --backend cpu --out " +
          (fs::temp_directory_path() / "kestrel_cli_diverging").string());
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("the training loss became NaN or infinite at step"), std::string::npos) << r.output;
}

}  // namespace
