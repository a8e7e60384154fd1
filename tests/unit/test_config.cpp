// Run configs: the kinds become enums once, defaults stay where they are declared, and every mistake
// names the file, the JSON path and what belongs there (the same checked-JSON reader as model files).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kestrel/config.h"

namespace {

using kestrel::RunConfig;

std::string error_of(const std::string& text) {
  try {
    RunConfig::parse(text, "runs/c.train.json");
  } catch (const kestrel::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RunConfig, KindsAndDefaults) {
  RunConfig c = RunConfig::parse(R"({"model": "m.json", "loss": "mse", "optimizer": {"type": "adamw"},
                                      "schedule": {"type": "cosine", "warmup_steps": 5}, "seed": 7})",
                                 "runs/c.train.json");
  EXPECT_EQ(c.model_path, "runs/m.json");
  EXPECT_EQ(c.loss, kestrel::LossKind::mse);
  EXPECT_EQ(c.optimizer.type, kestrel::OptimizerKind::adamw);
  EXPECT_EQ(c.optimizer.weight_decay, 0.01);  // torch's AdamW default
  EXPECT_EQ(c.schedule.type, kestrel::ScheduleKind::cosine);
  EXPECT_EQ(c.schedule.warmup_steps, 5);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.batch_size, 64);  // as declared in config.h
  EXPECT_EQ(c.data.dataset, "fashion-mnist");
  EXPECT_EQ(RunConfig::parse(R"({"model": "m.json", "optimizer": {"type": "adamw", "weight_decay": 0}})", "c.json")
                .optimizer.weight_decay,
            0.0);
}

TEST(RunConfig, MistakesNameTheFileThePathAndWhatBelongsThere) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "m.json", "data": {"workers": 0}})", "runs/c.train.json: /data/workers: expected an integer from 1 to 256, got 0"},
      {R"({"model": "m.json", "seed": 18446744073709551615})", "/seed: expected an integer >= 0, got 18446744073709551615"},
      {R"({"model": "m.json", "optimizer": {"lr": "big"}})", "/optimizer/lr: expected a number in [0, 10], got \"big\""},
      {R"({"model": "m.json", "optimizer": {"clip_grad_norm": -0.5}})",
       "/optimizer/clip_grad_norm: expected a number in [0, 1000000000], got -0.5"},
      {R"({"model": "m.json", "schedule": {"type": "linear"}})",
       "/schedule/type: expected one of constant, step, cosine, got \"linear\""},
      {R"({"model": "m.json", "loss": 3})", "/loss: expected one of cross_entropy, mse, got 3"},
      {R"({"model": "m.json", "data": {"mean": [0.5, "x"]}})", "/data/mean: expected a number or an array of numbers"},
      {R"({"model": "m.json", "data": {"input_shape": [2, 0]}})", "/data/input_shape: expected an array of positive integers"},
      {R"({"model": "m.json", "backend": {"preference": []}})",
       "/backend/preference: expected a non-empty array of backend names, got []"},
      {R"({"model": "m.json", "eval": {"batch": 5}})", "/eval/batch: unknown key; valid keys here: batch_size"},
      {R"({"model": "m.json", "data": 3})", "/data: expected a JSON object, got 3"},
      {R"({"data": {}})", "/model: name the model file"},
      // Range-checked in the type they are stored in: 2^32 + 2 used to become 2.
      {R"({"model": "m.json", "checkpoint": {"keep": 4294967298}})",
       "/checkpoint/keep: expected an integer from 1 to 2147483647, got 4294967298"},
      {R"({"model": "m.json", "data": {"workers": 2147483647}})", "/data/workers: expected an integer from 1 to 256"},
      {R"({"model": "m.json", "nonfinite_loss": "skip"})", "/nonfinite_loss: expected one of stop, continue"},
      // nlohmann would keep the last of two keys silently.
      {R"({"model": "m.json", "optimizer": {"lr": 0.1, "type": "sgd", "lr": 1}})",
       "runs/c.train.json: /optimizer: the key 'lr' appears twice in one object"},
      {R"({"model": "m.json", "data": {"mean": [0, 1]}, "data": {}})", "/: the key 'data' appears twice"},
      // Found by fuzzing: a number beyond double's range escaped as a JSON library error (exit 1).
      {R"({"model": "m.json", "epochs": 1e4334})", "runs/c.train.json: invalid JSON: "},
      // Text data.
      {R"({"model": "m.json", "data": {"dataset": "text"}})", "/data/path: a text dataset needs the path"},
      {R"({"model": "m.json", "data": {"dataset": "text", "path": "t", "tokenizer": "word"}})",
       "/data/tokenizer: expected one of char, byte"},
      {R"({"model": "m.json", "data": {"dataset": "text", "path": "t", "validation_fraction": 0}})",
       "/data/validation_fraction: a text dataset holds out a part of every file"},
      {R"({"model": "m.json", "data": {"dataset": "text", "path": "t", "task": "categories", "categories": ["a"]}})",
       "/data/categories: the categories task needs at least two file names"},
      {R"({"model": "m.json", "data": {"dataset": "text", "path": "t", "separator": ""}})", "/data/separator: give the text"},
      {R"({"model": "m.json", "data": {"dataset": "text", "path": "t", "task": "categories", "categories": ["a", "b"],
           "tokenizer": "byte"}})",
       "/data/tokenizer: the categories task pads short documents with id 0"},
      {R"({"model": "m.json", "data": {"dataset": "text", "path": "t", "context": 0}})",
       "/data/context: expected an integer from 1 to 16777216"},
  };
  for (const auto& [text, expected] : cases) EXPECT_NE(error_of(text).find(expected), std::string::npos) << error_of(text);
}

TEST(RunConfig, DeepNestingIsRefusedBeforeAnythingRecursesOverIt) {
  // 100,000 levels used to overflow the stack while an error message printed the value. The object
  // itself is the first level, so the 64th bracket (column 94) is one too many.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string error = error_of(R"({"model": "m.json", "epochs": )" + deep + "}");
  EXPECT_NE(error.find("runs/c.train.json: invalid JSON at line 1, column 94: nested deeper than 64 levels"),
            std::string::npos)
      << error;
  // 64 levels in all are fine for the parser; the reader then says what belongs there.
  const std::string allowed = std::string(63, '[') + std::string(63, ']');
  EXPECT_NE(error_of(R"({"model": "m.json", "epochs": )" + allowed + "}").find("/epochs: expected an integer >= 1"),
            std::string::npos);
}

}  // namespace

// Flags and the C and Python APIs change a parsed config; the Trainer checks it again (RunConfig::check)
// before it touches the run folder, so an override cannot get past what parsing refuses.
TEST(RunConfig, OverridesAreCheckedAsTheFileIs) {
  const RunConfig parsed = RunConfig::parse(R"({"model": "m.json", "batch_size": 8})", "runs/c.train.json");
  auto error_after = [&](const std::function<void(RunConfig&)>& change) {
    RunConfig c = parsed;
    change(c);
    try {
      c.check();
    } catch (const kestrel::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error_after([](RunConfig& c) { c.epochs = 0; }).find("runs/c.train.json: /epochs: 0 is out of range"),
            std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.max_steps = -5; }).find("/max_steps"), std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.optimizer.lr = 1e30; }).find("/optimizer/lr"), std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.optimizer.clip_grad_norm = -1; }).find("/optimizer/clip_grad_norm"),
            std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.optimizer.clip_grad_norm = 1e-40; }).find("/optimizer/clip_grad_norm"),
            std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.data.train_subset = -5; }).find("/data/train_subset"), std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.data.workers = 1 << 30; }).find("/data/workers"), std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) { c.set_accumulate_steps(3); }).find("/accumulate_steps: 3 micro-batches"),
            std::string::npos);
  EXPECT_NE(error_after([](RunConfig& c) {
              c.distributed.deterministic = true;
              c.set_accumulate_steps(2);
            }).find("/distributed/deterministic"),
            std::string::npos);
  EXPECT_EQ(error_after([](RunConfig& c) { c.set_accumulate_steps(4); }), "(accepted)");

  // An explicit number of micro-batches replaces "auto".
  RunConfig fitted = RunConfig::parse(R"({"model": "m.json", "accumulate_steps": "auto"})", "c.json");
  EXPECT_TRUE(fitted.fit_memory);
  fitted.set_accumulate_steps(4);
  EXPECT_FALSE(fitted.fit_memory);
  EXPECT_EQ(fitted.accumulate_steps, 4);

  // A backend list as --backend takes it: one name means that one or an error.
  RunConfig c = parsed;
  c.set_backends("vulkan,cpu");
  EXPECT_EQ(c.backends, (std::vector<std::string>{"vulkan", "cpu"}));
  EXPECT_EQ(c.fallback, "next");
  c.set_backends("cuda:1");
  EXPECT_EQ(c.backends, (std::vector<std::string>{"cuda:1"}));
  EXPECT_EQ(c.fallback, "error");
}
