// Data-parallel training on the CPU backend (and Vulkan's, on lavapipe) with real ranks under mpirun: the same global batch trains
// the same model at any world size, every rank ends with the same parameters, a resumed run may change
// its world size, mismatched ranks are refused by name, and a killed or stalled rank ends the whole run
// within its deadline, naming the rank, with no process left behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "kestrel/engine.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string mpirun = KESTREL_MPIRUN;

// A run of a small MLP on synthetic data in a fresh folder: config, model and outputs.
struct RunFiles {
  fs::path dir;
  std::string config;
  std::string out;
};

RunFiles make_run(const std::string& name, const std::string& extra_settings = "", const std::string& backend = "cpu") {
  RunFiles run;
  run.dir = fs::temp_directory_path() / ("kestrel_dp_" + name);
  fs::remove_all(run.dir);
  fs::create_directories(run.dir);
  std::ofstream(run.dir / "mlp.json") << R"({"name": "dp_mlp", "input": {"shape": [32]}, "layers": [
      {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "linear", "out_features": 10}]})";
  std::ofstream(run.dir / "run.json") << R"({"model": "mlp.json",
      "data": {"dataset": "synthetic", "train_samples": 500, "test_samples": 48, "classes": 10, "workers": 1},
      "optimizer": {"type": "adam", "lr": 0.001}, "batch_size": 24, "epochs": 1, "max_steps": 20, "seed": 3,
      "log_every": 5, "backend": {"preference": [")" + backend + R"("]})" +
                                                 extra_settings + "}";
  run.config = (run.dir / "run.json").string();
  run.out = (run.dir / "out").string();
  return run;
}

// Replaces `from` by `to` in the run's config text (settings make_run writes itself).
void rewrite_config(const RunFiles& run, const std::string& from, const std::string& to) {
  std::ifstream in(run.config);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(run.config, std::ios::trunc) << text;
}

std::vector<float> read_parameters(const std::string& out, int rank) {
  std::ifstream in(out + "/params.rank" + std::to_string(rank) + ".f32", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(difference / norm);
}

// Whether two ranks on this machine can train on Vulkan: one device each, or a software device (lavapipe)
// that ranks share as they share the CPU (a single real GPU refuses the second rank: one device per rank).
bool vulkan_takes_two_ranks() {
  kestrel::Engine engine;
  if (!engine.is_available("vulkan") || engine.device_count("vulkan") == 0) return false;
  const std::string kind = engine.properties(engine.device("vulkan:0")).kind;
  return kind == "cpu" || kind == "software" || engine.device_count("vulkan") >= 2;
}

// The worker (the C++ API) as `ranks` processes, or alone for 0.
CliRun run_worker(int ranks, const RunFiles& run, const std::string& out, const std::string& args = "") {
  const std::string launch = ranks ? mpirun + " -np " + std::to_string(ranks) + " " : "";
  return run_command(launch + KESTREL_DP_WORKER + " " + run.config + " " + out + " " + args);
}

TEST(DataParallel, AnyWorldSizeTrainsLikeOneProcessAndRanksAgreeBitForBit) {
  RunFiles run = make_run("world_sizes");
  CliRun alone = run_worker(0, run, run.out + "1");
  ASSERT_EQ(alone.status, 0) << alone.output;
  const std::vector<float> reference = read_parameters(run.out + "1", 0);
  ASSERT_FALSE(reference.empty());
  for (int ranks : {2, 3, 4}) {
    const std::string out = run.out + std::to_string(ranks);
    CliRun result = run_worker(ranks, run, out);
    ASSERT_EQ(result.status, 0) << result.output;
    const std::vector<float> rank0 = read_parameters(out, 0);
    ASSERT_EQ(rank0.size(), reference.size());
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(read_parameters(out, r), rank0) << "rank " << r << " of " << ranks;
    // The sums run in another order than one process's: a few f32 roundings, not a different model.
    EXPECT_LE(relative_difference(rank0, reference), 1e-5) << ranks << " ranks";
  }
}

// One process driving two devices (KESTREL_CPU_DEVICES=2 shows the host as cpu:0 and cpu:1) trains as
// two processes do: the same shards, the same sums (two ranks' gradients added once), so the same bits.
TEST(DataParallel, TwoDevicesOfOneProcessTrainAsTwoProcesses) {
  RunFiles run = make_run("in_process", R"(, "distributed": {"devices": ["cpu:0", "cpu:1"]},
      "checkpoint": {"every_steps": 4})");
  RunFiles processes = make_run("in_process_mpi");
  CliRun two = run_worker(2, processes, processes.out);
  ASSERT_EQ(two.status, 0) << two.output;
  CliRun threads = run_command("KESTREL_CPU_DEVICES=2 " KESTREL_DP_WORKER " " + run.config + " " + run.out);
  ASSERT_EQ(threads.status, 0) << threads.output;
  const std::vector<float> reference = read_parameters(processes.out, 0), rank0 = read_parameters(run.out, 0);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(read_parameters(run.out, 1), rank0);
  EXPECT_EQ(rank0, reference);
  // Stopped as if killed after step 8's checkpoint (written by rank 0), then resumed: the same bits.
  const std::string two_devices = "KESTREL_CPU_DEVICES=2 " KESTREL_DP_WORKER " " + run.config + " " + run.out + "_resumed";
  CliRun first = run_command(two_devices + " --interrupt-after 8");
  ASSERT_EQ(first.status, 0) << first.output;
  CliRun rest = run_command(two_devices + " --resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  EXPECT_EQ(read_parameters(run.out + "_resumed", 0), rank0);

  // The deterministic mode (all-gathers of every shard's gradient) matches one process bit for bit, and
  // ZeRO-1 (reduce-scatter, all-gather) the unsharded two-device run, as they do across processes.
  const std::string dropout_mlp = R"({"name": "dp_mlp", "input": {"shape": [32]}, "layers": [
      {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
      {"type": "linear", "out_features": 10}]})";
  RunFiles fixed = make_run("in_process_deterministic", R"(, "distributed": {"deterministic": true, "shards": 4,
      "devices": ["cpu:0", "cpu:1"]})");
  std::ofstream(fixed.dir / "mlp.json", std::ios::trunc) << dropout_mlp;
  RunFiles fixed_alone = make_run("in_process_deterministic_alone", R"(, "distributed": {"deterministic": true, "shards": 4})");
  std::ofstream(fixed_alone.dir / "mlp.json", std::ios::trunc) << dropout_mlp;
  // Into a second epoch past a short last batch of 5 samples, whose 4 shards hold 1, 1, 1 and 2 (found by
  // review: rank 0's dropout counter then fell behind the others' and one process's).
  for (const RunFiles& r : {fixed, fixed_alone}) {
    rewrite_config(r, R"("train_samples": 500)", R"("train_samples": 485)");
    rewrite_config(r, R"("epochs": 1, "max_steps": 20)", R"("epochs": 2, "max_steps": 24)");
  }
  ASSERT_EQ(run_command("KESTREL_CPU_DEVICES=2 " KESTREL_DP_WORKER " " + fixed.config + " " + fixed.out).status, 0);
  ASSERT_EQ(run_worker(0, fixed_alone, fixed_alone.out).status, 0);
  EXPECT_EQ(read_parameters(fixed.out, 1), read_parameters(fixed_alone.out, 0));
  RunFiles sharded = make_run("in_process_zero", R"(, "distributed": {"shard_optimizer": true, "devices": ["cpu:0", "cpu:1"]})");
  ASSERT_EQ(run_command("KESTREL_CPU_DEVICES=2 " KESTREL_DP_WORKER " " + sharded.config + " " + sharded.out).status, 0);
  EXPECT_EQ(read_parameters(sharded.out, 0), rank0);
  EXPECT_EQ(read_parameters(sharded.out, 1), rank0);

  // Bad lists are refused by name: one device, a device twice, a device that is not there.
  for (const std::string& devices : {R"(["cpu:0"])", R"(["cpu:0", "cpu:0"])", R"(["cpu:0", "cpu:7"])"}) {
    RunFiles bad = make_run("in_process_bad", R"(, "distributed": {"devices": )" + devices + "}");
    CliRun refused = run_command("KESTREL_CPU_DEVICES=2 " KESTREL_DP_WORKER " " + bad.config + " " + bad.out);
    EXPECT_NE(refused.status, 0) << devices;
    EXPECT_NE(refused.output.find(devices == R"(["cpu:0", "cpu:7"])" ? "cpu:7" : "/distributed/devices"),
              std::string::npos)
        << refused.output;
  }
}

// A progress callback that stops the run on one rank only stops every rank at that step (found by review:
// the stopping rank's checkpoint collective met the others' next step).
TEST(DataParallel, AStopAskedByOneRanksCallbackStopsEveryRank) {
  RunFiles run = make_run("callback_stop");
  fs::create_directories(run.out);
  CliRun result = run_worker(2, run, run.out, "--stop-on-rank 1 5");
  ASSERT_EQ(result.status, 0) << result.output;
  for (int r = 0; r < 2; ++r) {
    std::ifstream steps(run.out + "/steps.rank" + std::to_string(r));
    int64_t trained = 0;
    steps >> trained;
    EXPECT_EQ(trained, 5) << "rank " << r;
  }
  EXPECT_EQ(read_parameters(run.out, 0), read_parameters(run.out, 1));
}

TEST(DataParallel, DeterministicModeIsBitIdenticalToOneProcessAtEveryWorldSize) {
  // Dropout in the model: each shard draws its own masks, wherever it runs.
  RunFiles run = make_run("deterministic", R"(, "distributed": {"deterministic": true, "shards": 12})");
  std::ofstream(run.dir / "mlp.json", std::ios::trunc) << R"({"name": "dp_mlp", "input": {"shape": [32]}, "layers": [
      {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
      {"type": "linear", "out_features": 10}]})";
  ASSERT_EQ(run_worker(0, run, run.out + "1").status, 0);
  const std::vector<float> reference = read_parameters(run.out + "1", 0);
  for (int ranks : {2, 3, 4}) {
    const std::string out = run.out + std::to_string(ranks);
    CliRun result = run_worker(ranks, run, out);
    ASSERT_EQ(result.status, 0) << result.output;
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(read_parameters(out, r), reference) << "rank " << r << " of " << ranks;
  }
  // Not a run that never moved: the ordinary mode on 3 ranks lands elsewhere, if close.
  RunFiles plain = make_run("deterministic_plain");
  std::ofstream(plain.dir / "mlp.json", std::ios::trunc) << R"({"name": "dp_mlp", "input": {"shape": [32]}, "layers": [
      {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
      {"type": "linear", "out_features": 10}]})";
  ASSERT_EQ(run_worker(3, plain, plain.out).status, 0);
  EXPECT_NE(read_parameters(plain.out, 0), reference);

  CliRun indivisible = run_worker(5, run, run.out + "5");
  EXPECT_NE(indivisible.status, 0);
  EXPECT_NE(indivisible.output.find("12 micro-shards do not divide among 5 ranks"), std::string::npos)
      << indivisible.output;
}

TEST(DataParallel, ResumesWithAnotherNumberOfRanks) {
  // 8 steps on 2 ranks, stopped as if killed after a checkpoint, then the rest on 3 ranks.
  RunFiles run = make_run("resume", R"(, "checkpoint": {"every_steps": 4})");
  CliRun first = run_worker(2, run, run.out, "--interrupt-after 8");
  ASSERT_EQ(first.status, 0) << first.output;
  CliRun rest = run_worker(3, run, run.out, "--resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  CliRun whole = run_worker(0, run, run.out + "_whole");
  ASSERT_EQ(whole.status, 0) << whole.output;
  EXPECT_LE(relative_difference(read_parameters(run.out, 0), read_parameters(run.out + "_whole", 0)), 1e-5);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(read_parameters(run.out, r), read_parameters(run.out, 0));
}

// Each rank resumes from its own dropout counter. 485 samples in batches of 24 end each epoch with a batch
// of 5, which 2 ranks share 2 and 3: their counters part there, and the checkpoint at the epoch's end holds
// both. Stopped there and resumed on 2 ranks, the run lands where the uninterrupted one does, bit for bit.
TEST(DataParallel, EachRankResumesFromItsOwnDropoutCounter) {
  RunFiles run = make_run("own_dropout", R"(, "checkpoint": {"every_steps": 21})");  // an epoch's 21 batches
  std::ofstream(run.dir / "mlp.json", std::ios::trunc) << R"({"name": "dp_mlp", "input": {"shape": [32]}, "layers": [
      {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
      {"type": "linear", "out_features": 10}]})";
  rewrite_config(run, R"("train_samples": 500)", R"("train_samples": 485)");
  rewrite_config(run, R"("epochs": 1, "max_steps": 20)", R"("epochs": 2, "max_steps": 0)");
  CliRun whole = run_worker(2, run, run.out + "_whole");
  ASSERT_EQ(whole.status, 0) << whole.output;
  CliRun first = run_worker(2, run, run.out, "--interrupt-after 21");  // the first epoch, short batch included
  ASSERT_EQ(first.status, 0) << first.output;
  std::ifstream state(run.out + "/checkpoint.json");
  const nlohmann::json saved = nlohmann::json::parse(state);
  ASSERT_EQ(saved["rank_rng_offsets"].size(), 2u) << saved.dump();
  EXPECT_LT(saved["rank_rng_offsets"][0].get<uint64_t>(), saved["rank_rng_offsets"][1].get<uint64_t>());
  EXPECT_EQ(saved["rng_offset"], saved["rank_rng_offsets"][1]);
  CliRun rest = run_worker(2, run, run.out, "--resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  EXPECT_EQ(read_parameters(run.out, 0), read_parameters(run.out + "_whole", 0));
  EXPECT_EQ(read_parameters(run.out, 1), read_parameters(run.out, 0));
}

TEST(DataParallel, ShardedOptimizerStateTrainsAsUnshardedAndResumesOnOtherRanks) {
  RunFiles plain = make_run("zero_plain");
  ASSERT_EQ(run_worker(2, plain, plain.out).status, 0);
  const std::vector<float> unsharded = read_parameters(plain.out, 0);
  RunFiles run = make_run("zero", R"(, "distributed": {"shard_optimizer": true}, "checkpoint": {"every_steps": 4})");
  CliRun sharded = run_worker(2, run, run.out + "2");
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  // Adam is element-wise: each rank's part of the update is the unsharded update of those elements.
  EXPECT_EQ(read_parameters(run.out + "2", 0), unsharded);
  EXPECT_EQ(read_parameters(run.out + "2", 1), unsharded);
  CliRun three = run_worker(3, run, run.out + "3");
  ASSERT_EQ(three.status, 0) << three.output;
  EXPECT_LE(relative_difference(read_parameters(run.out + "3", 0), unsharded), 1e-5);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(read_parameters(run.out + "3", r), read_parameters(run.out + "3", 0));
  // The checkpoint holds the whole state: 8 steps on 2 ranks, the rest on 3.
  ASSERT_EQ(run_worker(2, run, run.out + "_resumed", "--interrupt-after 8").status, 0);
  CliRun rest = run_worker(3, run, run.out + "_resumed", "--resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  EXPECT_LE(relative_difference(read_parameters(run.out + "_resumed", 0), unsharded), 1e-5);

  CliRun told = run_command(mpirun + " -np 2 " + KESTREL_CLI + " train " + run.config + " --out " + run.out +
                            "_cli --no-progress");
  ASSERT_EQ(told.status, 0) << told.output;
  // 2762 parameters: 1381 per rank, two Adam moments of 4 bytes each.
  EXPECT_NE(told.output.find("optimizer state sharded (ZeRO-1): 0.011 MiB on each rank, for its 1381 of the 2762"),
            std::string::npos)
      << told.output;
}

// The Vulkan plugin's collectives, host-staged over the CPU plugin's MPI transport: two ranks sharing
// one lavapipe device train as one Vulkan process does, and the deterministic mode is bit-identical to it.
TEST(DataParallel, VulkanRanksTrainLikeOneVulkanProcess) {
  const kestrel::Engine engine;
  if (!engine.is_available("vulkan") || engine.device_count("vulkan") == 0)
    GTEST_SKIP() << "no Vulkan device (Mesa's lavapipe gives one)";
  RunFiles run = make_run("vulkan", "", "vulkan");
  if (!vulkan_takes_two_ranks()) {  // one real GPU: the second rank is refused by name, not left to share it
    CliRun two = run_worker(2, run, run.out + "2");
    EXPECT_NE(two.status, 0);
    EXPECT_NE(two.output.find("one device per rank"), std::string::npos) << two.output;
    return;
  }
  ASSERT_EQ(run_worker(0, run, run.out + "1").status, 0);
  CliRun two = run_worker(2, run, run.out + "2");
  ASSERT_EQ(two.status, 0) << two.output;
  const std::vector<float> reference = read_parameters(run.out + "1", 0), rank0 = read_parameters(run.out + "2", 0);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(read_parameters(run.out + "2", 1), rank0);
  EXPECT_LE(relative_difference(rank0, reference), 1e-5);

  RunFiles fixed = make_run("vulkan_deterministic", R"(, "distributed": {"deterministic": true, "shards": 4})", "vulkan");
  ASSERT_EQ(run_worker(0, fixed, fixed.out + "1").status, 0);
  CliRun fixed_two = run_worker(2, fixed, fixed.out + "2");
  ASSERT_EQ(fixed_two.status, 0) << fixed_two.output;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(read_parameters(fixed.out + "2", r), read_parameters(fixed.out + "1", 0));
}

TEST(DataParallel, OnlyRankZeroWritesAndSpeaks) {
  RunFiles run = make_run("rank_zero");
  CliRun result = run_command(mpirun + " -np 2 " + KESTREL_CLI + " train " + run.config + " --out " + run.out +
                              " --no-progress");
  ASSERT_EQ(result.status, 0) << result.output;
  auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = result.output.find(text); at != std::string::npos; at = result.output.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("final: 20 steps"), 1u) << result.output;
  EXPECT_EQ(count("data-parallel over 2 ranks"), 1u) << result.output;
  EXPECT_TRUE(fs::exists(run.out + "/checkpoint.json"));
  EXPECT_TRUE(fs::exists(run.out + "/summary.json"));
  // Each rank evaluates its share of the test set; the sums over the ranks are one process's figures.
  CliRun alone = run_cli("train " + run.config + " --out " + run.out + "_alone --quiet");
  ASSERT_EQ(alone.status, 0) << alone.output;
  auto summary = [](const std::string& out) {
    std::ifstream in(out + "/summary.json");
    return nlohmann::json::parse(in);
  };
  const nlohmann::json both = summary(run.out), one = summary(run.out + "_alone");
  EXPECT_EQ(both["test_samples"], one["test_samples"]);
  EXPECT_NEAR(double(both["test_loss"]), double(one["test_loss"]), 1e-5 * double(one["test_loss"]));
  EXPECT_EQ(both["test_accuracy"], one["test_accuracy"]);
  EXPECT_EQ(both["world_size"], 2);
}

TEST(DataParallel, RefusesMismatchedRanksAndBatchesThatDoNotDivide) {
  RunFiles run = make_run("mismatch");
  const std::string train = std::string(KESTREL_CLI) + " train " + run.config + " --out " + run.out + " --quiet";
  // MPMD: the two ranks get different flags.
  CliRun mismatched = run_command(mpirun + " -np 1 " + train + " --lr 0.001 : -np 1 " + train + " --lr 0.002");
  EXPECT_EQ(mismatched.status, 2) << mismatched.output;
  EXPECT_NE(mismatched.output.find("the ranks run different configurations"), std::string::npos) << mismatched.output;
  EXPECT_NE(mismatched.output.find("lr 0.002"), std::string::npos) << mismatched.output;

  CliRun indivisible = run_command(mpirun + " -np 3 " + train + " --batch-size 32");
  EXPECT_EQ(indivisible.status, 2) << indivisible.output;
  EXPECT_NE(indivisible.output.find("do not divide among 3 ranks"), std::string::npos) << indivisible.output;
}

// Processes whose command line holds `marker`, with the MPI rank each was started as (-1: not a rank).
std::vector<std::pair<pid_t, int>> processes_with(const std::string& marker) {
  std::vector<std::pair<pid_t, int>> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline"), environ(entry.path() / "environ");
    std::string command((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (command.find(marker) == std::string::npos || command.find("kestrel") == std::string::npos) continue;
    if (command.rfind("/bin/sh", 0) == 0 || command.find("mpirun") != std::string::npos) continue;
    std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    size_t at = env.find(key);
    int rank = at == std::string::npos ? -1 : std::atoi(env.c_str() + at + key.size());
    found.push_back({std::stoi(name), rank});
  }
  return found;
}

struct Fault {
  CliRun result;
  double seconds;  // from the fault to the launcher's exit
  std::vector<std::pair<pid_t, int>> left;  // processes of the run still alive after it
};

// Two ranks training for good; once they are stepping, rank 1 gets `signal`.
Fault inject(const std::string& name, int signal, double timeout, const std::string& backend = "cpu") {
  RunFiles run = make_run(name, R"(, "distributed": {"timeout_seconds": )" + std::to_string(timeout) + "}", backend);
  const std::string command = mpirun + " -np 2 " + KESTREL_CLI + " train " + run.config + " --out " + run.out +
                              " --no-progress --max-steps 0 --epochs 1000000";
  auto launched = std::async(std::launch::async, [&] { return run_command(command); });
  // Stepping once rank 0 has logged a few reports (log_every 5).
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  pid_t victim = 0;
  while (Clock::now() < give_up && !victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream metrics(run.out + "/metrics.jsonl");
    std::string line;
    int lines = 0;
    while (std::getline(metrics, line)) ++lines;
    if (lines < 3) continue;
    for (auto [pid, rank] : processes_with(run.out))
      if (rank == 1) victim = pid;
  }
  Fault fault;
  if (!victim) {
    fault.result = {-1, "rank 1 never started stepping"};
    for (auto [pid, rank] : processes_with(run.out)) kill(pid, SIGKILL);
    launched.wait();
    return fault;
  }
  const auto injected = Clock::now();
  kill(victim, signal);
  if (launched.wait_for(std::chrono::seconds(int(timeout) + 30)) != std::future_status::ready) {
    for (auto [pid, rank] : processes_with(run.out)) kill(pid, SIGKILL);  // never leave a hung run behind
  }
  fault.result = launched.get();
  fault.seconds = std::chrono::duration<double>(Clock::now() - injected).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  fault.left = processes_with(run.out);
  for (auto [pid, rank] : fault.left) kill(pid, SIGKILL);
  return fault;
}

TEST(DataParallel, AKilledRankEndsEveryRankWithinTheDeadline) {
  const double timeout = 3;
  Fault fault = inject("killed", SIGKILL, timeout);
  EXPECT_NE(fault.result.status, 0) << fault.result.output;
  EXPECT_LE(fault.seconds, timeout + 2) << fault.result.output;
  EXPECT_TRUE(fault.left.empty()) << fault.left.size() << " processes left behind";
}

void expect_stall_reported(const Fault& fault, double timeout) {
  EXPECT_EQ(fault.result.status, 4) << fault.result.output;
  EXPECT_NE(fault.result.output.find("rank 1 did not join it"), std::string::npos) << fault.result.output;
  // The deadline, the other ranks' half-second answer window, and MPI ending the job; slack for CI.
  EXPECT_LE(fault.seconds, timeout + 2) << fault.result.output;
  EXPECT_TRUE(fault.left.empty()) << fault.left.size() << " processes left behind";
}

TEST(DataParallel, AStalledRankIsNamedAndEveryRankEnds) {
  const double timeout = 3;
  Fault fault = inject("stalled", SIGSTOP, timeout);
  expect_stall_reported(fault, timeout);
  // What the report names depends on where rank 1 stopped: a step's gradient bucket (mostly), or the
  // evaluation's sums at an epoch's end (seen once the steps got faster).
  const std::string& output = fault.result.output;
  EXPECT_TRUE(output.find("step ") != std::string::npos || output.find("the evaluation") != std::string::npos)
      << output;
  std::cout << "stalled rank: the run ended " << fault.seconds << " s after the stall (timeout " << timeout << " s)\n";
}

// The Vulkan plugin blocks in its host-staged collective: the transport's timeout still ends it (where:
// a gradient bucket or the evaluation's sums, whichever rank 1 stalled before).
TEST(DataParallel, AStalledVulkanRankIsNamedAndEveryRankEnds) {
  if (!vulkan_takes_two_ranks()) GTEST_SKIP() << "no Vulkan device that two ranks can take";
  const double timeout = 3;
  expect_stall_reported(inject("stalled_vulkan", SIGSTOP, timeout, "vulkan"), timeout);
}

}  // namespace
