// Training against careless or hostile input: an edited checkpoint.json, a loss that becomes NaN,
// files left by a killed run, test data that does not fit the model. Each is refused with a message
// naming the file and what to do, or handled as documented (README, "Reliability").
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kestrel/io.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;
const std::string models = std::string(KESTREL_SOURCE_DIR) + "/models/";

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kestrel_faults_" + name);
  fs::remove_all(dir);
  return dir;
}

// 2 -> 5 linear regression, 32 batches of 32 per epoch: a run takes milliseconds.
kestrel::RunConfig regression_config(const fs::path& out, int64_t epochs = 2) {
  kestrel::RunConfig config = kestrel::RunConfig::load(models + "linear_regression.train.json");
  config.epochs = epochs;
  config.checkpoint_every = 10;
  config.backends = {"cpu"};
  config.out_dir = out.string();
  return config;
}

kestrel::TrainOptions quiet(bool resume = false) {
  kestrel::TrainOptions options;
  options.quiet = true;
  options.resume = resume;
  return options;
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(kestrel::io::read_file(path.string())); }

// Writes `state` as checkpoint.json, with a digest recomputed the way the engine computes it when
// `forge` is set (as someone editing the file on purpose would).
void write_state(const fs::path& dir, nlohmann::json state, bool forge) {
  if (forge) {
    state.erase("state_sha256");
    state["state_sha256"] = kestrel::io::sha256_hex(state.dump());
  }
  kestrel::io::write_file_atomically((dir / "checkpoint.json").string(), state.dump(2));
}

TEST(TrainingFaults, AnEditedCheckpointStateIsRefusedNamingTheField) {
  fs::path dir = fresh_dir("edited");
  kestrel::RunConfig config = regression_config(dir);
  kestrel::TrainOptions interrupt = quiet();
  interrupt.interrupt_after = 45;  // the last checkpoint: step 40, epoch 2, batch 8
  kestrel::Trainer(config).fit(interrupt);
  const nlohmann::json good = read_json(dir / "checkpoint.json");
  ASSERT_EQ(good["step"], 40);
  ASSERT_EQ(good["format"], "kestrel-train-state-3");

  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    bool forge;
    const char* expected;
  };
  const Case cases[] = {
      {"an edit without the digest", [](auto& s) { s["step"] = 41; }, false, "do not match its state_sha256"},
      {"the weights check switched off", [](auto& s) { s["weights_sha256"] = ""; }, false, "state_sha256"},
      {"a negative batch", [](auto& s) { s["batch"] = -1; }, true, "/batch: a checkpoint expects an integer >= 0"},
      {"step -1", [](auto& s) { s["step"] = -1; }, true, "/step: a checkpoint expects an integer >= 0"},
      {"no weights digest", [](auto& s) { s["weights_sha256"] = ""; }, true, "/weights_sha256: expected 64"},
      {"a missing field", [](auto& s) { s.erase("rng_offset"); }, true, "/rng_offset: a checkpoint needs"},
      {"an unknown field", [](auto& s) { s["lr"] = 1; }, true, "/lr: unknown"},
      {"a step off its epoch and batch", [](auto& s) { s["step"] = s["optimizer_steps"] = 39; s["weights"] =
           "checkpoints/step-000000039.safetensors"; }, true, "is not epoch 1 x 32 batches + batch 8"},
      {"weights outside the run", [](auto& s) { s["weights"] = "../x.safetensors"; }, true,
       "/weights: a checkpoint of step 40 names checkpoints/step-000000040.safetensors"},
      {"more optimizer steps than steps", [](auto& s) { s["optimizer_steps"] = 41; }, true,
       "/optimizer_steps: a checkpoint expects an integer from 0 to 40"},
      {"an epoch past the run", [](auto& s) { s["epoch"] = 7; s["step"] = 7 * 32 + 8; s["weights"] =
           "checkpoints/step-000000232.safetensors"; }, true, "it stands in epoch 8 but the run has 2 epochs"},
      {"the digest-less format 1", [](auto& s) { s["format"] = "kestrel-train-state-1"; }, true,
       "written by an earlier Kestrel"},
      {"correct labels in a regression", [](auto& s) { s["window"]["correct"] = 1; }, true, "(1 correct labels)"},
      {"a malformed vocabulary digest", [](auto& s) { s["vocabulary_sha256"] = "xyz"; }, true,
       "/vocabulary_sha256: expected empty (no vocabulary) or 64"},
      {"a vocabulary this run's data lacks", [](auto& s) { s["vocabulary_sha256"] = std::string(64, 'a'); }, true,
       "another vocabulary"},
  };
  for (const Case& c : cases) {
    nlohmann::json state = good;
    c.edit(state);
    write_state(dir, state, c.forge);
    const std::string error = error_of([&] { kestrel::Trainer(config).fit(quiet(true)); });
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.what << ": " << error;
    EXPECT_NE(error.find("checkpoint.json"), std::string::npos) << c.what << ": " << error;
  }

  // A batch size changed since the checkpoint moves the run to another place.
  write_state(dir, good, false);
  kestrel::RunConfig other_batch = config;
  other_batch.batch_size = 64;
  EXPECT_NE(error_of([&] { kestrel::Trainer(other_batch).fit(quiet(true)); }).find("the batch size or the data changed"),
            std::string::npos);
  // A state of format 2 (before vocabularies) still resumes: it means no vocabulary.
  nlohmann::json older = good;
  older["format"] = "kestrel-train-state-2";
  older.erase("vocabulary_sha256");
  write_state(dir, older, true);
  EXPECT_EQ(kestrel::Trainer(config).fit(quiet(true)).steps, 64);
}

TEST(TrainingFaults, ANonFiniteLossStopsTheRunNamingItsStep) {
  // lr 10 diverges: the loss overflows f32 in the second epoch. Told to continue and to record every
  // step, the run finishes, and its log shows the first step whose loss is not a number.
  fs::path on = fresh_dir("nonfinite_continue");
  kestrel::RunConfig keep_going = regression_config(on);
  keep_going.optimizer.lr = 10;
  keep_going.log_every = 1;
  keep_going.nonfinite_loss = kestrel::NonFiniteLoss::keep_going;
  kestrel::TrainSummary summary = kestrel::Trainer(keep_going).fit(quiet());
  EXPECT_EQ(summary.steps, 64);
  EXPECT_FALSE(std::isfinite(summary.test.loss));
  int64_t first_bad = 0;
  std::ifstream metrics(on / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line) && !first_bad;) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] == "train" && record["loss"].is_null()) first_bad = record["step"];
  }
  ASSERT_GT(first_bad, 32);

  // By default the run stops, naming that step although it reads the loss only every 50 steps (and no
  // checkpoint reads it between), and leaves no checkpoint of the diverged state.
  fs::path dir = fresh_dir("nonfinite");
  kestrel::RunConfig config = regression_config(dir);
  config.optimizer.lr = 10;
  config.checkpoint_every = 0;
  std::string error;
  try {
    kestrel::Trainer(config).fit(quiet());
    ADD_FAILURE() << "a diverged run finished";
  } catch (const kestrel::NonFiniteLossError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find(fmt::format("became NaN or infinite at step {} (epoch 2)", first_bad)), std::string::npos)
      << error;
  EXPECT_NE(error.find("nonfinite_loss"), std::string::npos) << error;
  EXPECT_LT(read_json(dir / "checkpoint.json")["step"].get<int64_t>(), first_bad);

  // A checkpoint of the run that continued, written inside a window with a NaN loss, resumes only
  // where continuing is allowed.
  fs::path again = fresh_dir("nonfinite_resume");
  keep_going.out_dir = again.string();
  keep_going.log_every = 50;
  keep_going.checkpoint_every = first_bad + 1;
  kestrel::TrainOptions interrupt = quiet();
  interrupt.interrupt_after = first_bad + 2;
  kestrel::Trainer(keep_going).fit(interrupt);
  ASSERT_TRUE(read_json(again / "checkpoint.json")["window"]["loss"].is_null());
  EXPECT_EQ(kestrel::Trainer(keep_going).fit(quiet(true)).steps, 64);
  kestrel::RunConfig stop = keep_going;
  stop.nonfinite_loss = kestrel::NonFiniteLoss::stop;
  kestrel::Trainer(keep_going).fit(interrupt);
  EXPECT_NE(error_of([&] { kestrel::Trainer(stop).fit(quiet(true)); })
                .find("the checkpoint resumed from was written at step " + std::to_string(first_bad + 1) +
                      " after the training loss had become NaN"),
            std::string::npos);
}

TEST(TrainingFaults, AResumeRemovesTheTemporariesOfAKilledWriterAndKeepsTheLogVerbatim) {
  fs::path dir = fresh_dir("stale");
  kestrel::RunConfig config = regression_config(dir);
  kestrel::TrainOptions interrupt = quiet();
  interrupt.interrupt_after = 25;
  kestrel::Trainer(config).fit(interrupt);

  // A writer killed mid-write leaves "<file>.tmp-<pid>-<nonce>-<n>": removed when its process is gone,
  // or when it has this process's pid but not its nonce (a run before a container restart); kept while
  // its writer runs.
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  const fs::path stale = dir / "checkpoints" / fmt::format("step-000000030.safetensors.tmp-{}-0badcafe-0", child);
  const fs::path earlier_container = dir / fmt::format("checkpoint.json.tmp-{}-00000000-7", getpid());
  const fs::path live = dir / fmt::format("checkpoint.json.tmp-{}-12345678-3", getppid());
  for (const fs::path& file : {stale, earlier_container, live}) std::ofstream(file) << "half a checkpoint";
  // A record before the resume point, written with other rounding than the engine's: kept byte for byte.
  const std::string hand_written = R"({"kind":"train", "step":1, "epoch":0, "loss":1.50, "seconds":0})";
  { std::ofstream(dir / "metrics.jsonl", std::ios::app) << hand_written << "\n"; }

  kestrel::Trainer(config).fit(quiet(true));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(earlier_container));
  EXPECT_TRUE(fs::exists(live));
  std::ifstream metrics(dir / "metrics.jsonl");
  bool kept = false;
  for (std::string line; std::getline(metrics, line);) kept = kept || line == hand_written;
  EXPECT_TRUE(kept);
}

TEST(TrainingFaults, TestDataThatDoesNotFitTheModelIsRefusedAtLoadNamingItsFile) {
  fs::path dir = fresh_dir("test_split");
  fs::create_directories(dir);
  std::ofstream(dir / "train.csv") << "a,b,label\n0,1,0\n1,0,1\n0.5,0.5,1\n";
  std::ofstream(dir / "wide.csv") << "a,b,c,label\n0,1,2,0\n";
  std::ofstream(dir / "labels.csv") << "a,b,label\n0,1,0\n1,0,7\n";
  std::ofstream(dir / "huge.csv") << "a,b,label\n0,1e39,0\n";
  std::ofstream(dir / "model.json") << R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 2}]})";
  auto config_for = [&](const std::string& test_file) {
    std::ofstream(dir / "run.train.json") << R"({"model": "model.json", "out": "run", "data": {"dataset": "csv",
      "train_file": "train.csv", "test_file": ")" + test_file + R"("}, "backend": {"preference": ["cpu"]}})";
    return kestrel::RunConfig::load((dir / "run.train.json").string());
  };
  std::string error = error_of([&] { kestrel::Trainer trainer(config_for("wide.csv")); });
  EXPECT_NE(error.find("wide.csv) has samples (3,)"), std::string::npos) << error;
  error = error_of([&] { kestrel::Trainer trainer(config_for("labels.csv")); });
  EXPECT_NE(error.find("cannot score the 8 classes of the test data ("), std::string::npos) << error;
  error = error_of([&] { kestrel::Trainer trainer(config_for("huge.csv")); });
  EXPECT_NE(error.find("'1e39' is beyond the f32 range"), std::string::npos) << error;
  EXPECT_NE(error.find("huge.csv"), std::string::npos) << error;
}

// Found by review (2026-11-27): with drop_last and a batch larger than the data nothing trained, and the
// previous run's checkpoint had been deleted first; the run is now refused before the folder is touched.
TEST(TrainingFaults, ABatchThatDropLastWouldDropWholeIsRefusedBeforeTheRunFolderIsTouched) {
  fs::path dir = fresh_dir("drop_last");
  kestrel::Trainer(regression_config(dir, 1)).fit(quiet());
  const fs::path state = dir / "checkpoint.json";
  const std::string before = kestrel::io::read_file(state.string());
  kestrel::RunConfig config = regression_config(dir, 1);
  config.drop_last = true;
  config.batch_size = 2048;  // the training set has 1024 samples
  const std::string error = error_of([&] { kestrel::Trainer(config).fit(quiet()); });
  EXPECT_NE(error.find("/drop_last: the training data has 1024 samples, fewer than /batch_size (2048)"),
            std::string::npos)
      << error;
  EXPECT_EQ(kestrel::io::read_file(state.string()), before) << "the previous run's checkpoint changed";
}

// A checkpoint is loaded for evaluation only into the model file it was written for; its weights file
// alone loads into a changed one whose tensors match (the way out the message names).
TEST(TrainingFaults, WeightsOfAnotherModelFileAreRefusedUnlessTheWeightsFileIsNamed) {
  fs::path dir = fresh_dir("model_file");
  fs::create_directories(dir);
  fs::copy_file(models + "linear_regression.json", dir / "model.json");
  kestrel::RunConfig config = regression_config(dir / "run", 1);
  config.model_path = (dir / "model.json").string();
  kestrel::Trainer(config).fit(quiet());
  std::ofstream(dir / "model.json", std::ios::app) << "\n";  // the same layers, another file
  kestrel::Trainer changed(config);
  const std::string error = error_of([&] { changed.load_weights((dir / "run").string()); });
  EXPECT_NE(error.find("it was written for the model file"), std::string::npos) << error;
  EXPECT_NE(error.find("name its weights file: "), std::string::npos) << error;
  std::string weights;
  for (const auto& entry : fs::directory_iterator(dir / "run" / "checkpoints")) weights = entry.path().string();
  EXPECT_EQ(error_of([&] { changed.load_weights(weights); }), "(no error)");
}

TEST(TrainingFaults, FitCalledFromItsOwnProgressCallbackIsRefused) {
  kestrel::Trainer trainer(regression_config(fresh_dir("nested_fit"), 1));
  std::string inner;
  kestrel::TrainOptions options = quiet();
  options.on_step = [&](const kestrel::TrainProgress&) {
    inner = error_of([&] { trainer.fit(quiet()); });
    return false;  // stop after the first step
  };
  trainer.fit(options);
  EXPECT_NE(inner.find("fit: this trainer is already training"), std::string::npos) << inner;
}

// An output folder that is a file is named with what to do (it was a raw filesystem error, exit 1).
TEST(TrainingFaults, AnOutputFolderThatIsAFileIsNamed) {
  const fs::path dir = fresh_dir("out_file");
  fs::create_directories(dir);
  std::ofstream(dir / "afile") << "x";
  const std::string error = error_of([&] { kestrel::Trainer(regression_config(dir / "afile" / "run", 1)).fit(quiet()); });
  EXPECT_NE(error.find("cannot make the run folder"), std::string::npos) << error;
  EXPECT_NE(error.find("afile/run"), std::string::npos) << error;
}

}  // namespace
