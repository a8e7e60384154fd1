// The trainer: one loop for every model and backend. Trains a RunConfig's model on its data, evaluates
// on the test set each epoch, records metrics, checkpoints atomically and resumes exactly. Started by a
// launcher (mpirun -np N), each process trains on its share of every batch and rank 0 speaks for the run.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/config.h"
#include "kestrel/data.h"
#include "kestrel/distributed.h"
#include "kestrel/engine.h"
#include "kestrel/memory_plan.h"
#include "kestrel/model.h"
#include "kestrel/optim.h"
#include "kestrel/text.h"

namespace kestrel {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // classification only (fraction, 0..1); NaN for regression
  int64_t samples = 0;
};

struct TrainSummary {
  std::string device;
  int64_t steps = 0;
  int64_t epochs = 0;
  double train_loss = 0;
  EvalResult test;
  double samples_per_second = 0;
  double seconds = 0;
  int64_t replayed_steps = 0;  // steps run as one replay of the captured step (see RunConfig::capture)
  bool cancelled = false;      // TrainOptions::on_step stopped the run
  int world_size = 1;          // data-parallel ranks
  // f16: the loss scale at the end and the steps skipped because their gradients overflowed.
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  // Data parallelism: seconds this rank waited, after its backward pass, for the gradient sums still in
  // flight (communication not hidden behind backward).
  double gradient_wait_seconds = 0;
  // ... and seconds from each step's first gradient bucket sent to its last sum done, summed over steps.
  double gradient_sync_seconds = 0;
  std::string out_dir;
};

// Where a run is, for TrainOptions::on_step.
struct TrainProgress {
  int64_t step = 0, total_steps = 0, epoch = 0;
  double loss = 0, accuracy = 0;  // as last reported (NaN before the first report)
};

struct TrainOptions {
  bool resume = false;       // continue from out_dir/checkpoint.json
  std::string resume_from;   // or from this checkpoint.json (or its folder)
  int progress = -1;         // 1: progress bar, 0: plain lines, -1: a bar when stdout is a terminal
  bool quiet = false;        // no output at all (tests, embedding)
  // Stops after this many optimizer steps as if the process were killed there: no evaluation, no final
  // checkpoint (0: never). For testing that --resume reproduces an uninterrupted run.
  int64_t interrupt_after = 0;
  // Called after every optimizer step; returning false stops the run there: a checkpoint is written
  // (so resume continues from it), nothing is evaluated, and fit() returns with `cancelled` set. With
  // data parallelism across processes every rank's callback is asked and the run stops when any says so
  // (agreed through a collective each step); ranks of one process (MultiDeviceTrainer) ask rank 0's.
  std::function<bool(const TrainProgress&)> on_step;
};

struct TrainState;   // engine-internal: epoch, batch, step, RNG offset, metrics window
struct CheckpointState;  // engine-internal: checkpoint.json
struct RunIdentity;  // engine-internal: model, device and their names, for reports
class MetricsWindow;  // engine-internal: training metrics since the last report
class OptimizerShards;  // engine-internal: ZeRO-1's parts of the optimizer state

struct Prediction {
  int64_t label = -1;                              // the true label
  std::vector<std::pair<int64_t, double>> top;     // (class, probability), best first
};

class SharedRunData;  // a run's data shared by the ranks of one process, engine-internal (train/run_data.h)

class Trainer {
 public:
  // Picks the device from the config's backend preference, loads data and builds the model. Under a
  // launcher also joins the other ranks (checking that they run the same thing).
  explicit Trainer(RunConfig config, Engine& engine = Engine::global());
  // One rank of `world` (one of World::in_process's, on the device the config's distributed.devices
  // names for it), constructed on that rank's thread. `data`: where the ranks of the process get the
  // run's data, loaded once for all of them (MultiDeviceTrainer: they only read it); null: this rank
  // loads its own.
  Trainer(RunConfig config, Engine& engine, World& world, std::shared_ptr<SharedRunData> data = nullptr);
  ~Trainer();

  TrainSummary fit(const TrainOptions& options = {});
  // The test set's loss and accuracy; with data parallelism a collective (every rank calls it).
  EvalResult evaluate();
  // What training will hold on the device at `batch_size` (0: the config's) with the config's
  // accumulation, and whether it fits (kestrel/memory_plan.h). Runs the model on two small batches;
  // leaves the weights and running statistics as they were.
  MemoryPlan plan_memory(int64_t batch_size = 0);
  // Loads weights into the model: from a run folder or its checkpoint.json, which must have been
  // written for this model file and (text data) vocabulary; or from a weights file (.safetensors), whose
  // tensors must match the model's names, shapes and dtypes and whose vocabulary, if it records one,
  // this run's (a way to load weights into a changed model file).
  void load_weights(const std::string& path);
  std::vector<Prediction> predict(int64_t count, int64_t top_k = 3);

  const RunConfig& config() const { return config_; }
  const World& world() const { return world_; }
  const Device& device() const { return device_; }
  Model& model() { return *model_; }
  const data::Dataset& train_data() const { return *train_; }
  const data::Dataset& test_data() const { return *test_; }
  // Text data: its vocabulary (written to the run folder as vocabulary.json); nullptr for other data.
  const data::Vocabulary* vocabulary() const { return vocabulary_ ? &*vocabulary_ : nullptr; }
  // Class names for printing predictions: the test set's (Fashion-MNIST's), or "class N".
  std::string class_name(int64_t label) const;

 private:
  void refuse_without_samples(const char* what) const;  // fit and evaluate, on data.vocabulary_file alone
  RunIdentity identity() const;
  // Whether the run goes on after `step`, given this rank's callback's answer: with data parallelism
  // across processes, not if any rank's says stop.
  bool ranks_go_on(bool mine, int64_t step);
  // Sets accumulate_steps from the memory plan (RunConfig::fit_memory); returns what to tell the user.
  std::string fit_to_memory();
  EvalResult evaluate_on(const std::shared_ptr<const data::Dataset>& dataset);
  void save_checkpoint(TrainState state, const MetricsWindow& metrics);
  // The state of the checkpoint at `path` (a run folder or its checkpoint.json), checked against this
  // run (batches_per_epoch: the loader's), with the weights and optimizer state loaded.
  TrainState restore_checkpoint(const std::string& path, int64_t batches_per_epoch);
  // Copies named tensors from a safetensors file into the model (and the optimizer when asked).
  // expected_sha256: the file's digest from checkpoint.json, or empty for a bare weights file.
  void load_tensors(const std::string& weights_path, const std::string& expected_sha256, bool with_optimizer);
  // Throws unless the checkpoint was written for this run's model file, as it is now, and its token ids
  // mean what this run's data makes them mean; `otherwise` ends the model's message (another way out).
  void check_written_for_this_run(const std::string& state_path, const CheckpointState& saved,
                                  const std::string& otherwise) const;
  // Throws unless token ids fingerprinted `vocabulary_sha256` ("" without text data) are this run's.
  void check_vocabulary(const std::string& path, const std::string& vocabulary_sha256) const;

  RunConfig config_;
  Engine& engine_;
  World& world_;
  Device device_;
  std::shared_ptr<const data::Dataset> train_, test_;
  std::optional<data::Vocabulary> vocabulary_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  bool fitting_ = false;  // fit() is running: a progress callback may not start another
  std::unique_ptr<ProcessGroup> group_;  // the data-parallel ranks; null for one process
  std::unique_ptr<OptimizerShards> shards_;  // with "shard_optimizer"; the optimizer holds this rank's part
};

// One process driving several devices, as torch's DataParallel does (RunConfig's distributed.devices): a
// Trainer per device, each on a thread of its own as one rank of an in-process world, running the same
// data-parallel steps as processes started by a launcher (gradients summed over the ranks, rank 0
// writing the run's files). A rank that fails stops the others, and fit() throws its error.
class MultiDeviceTrainer {
 public:
  explicit MultiDeviceTrainer(RunConfig config, Engine& engine = Engine::global());
  ~MultiDeviceTrainer();

  // Trains on every device; rank 0's summary (and only rank 0 reports through `options`).
  TrainSummary fit(const TrainOptions& options = {});
  // The test set's loss and accuracy, evaluated by every rank on its share (a collective, as Trainer's).
  EvalResult evaluate();
  int size() const { return int(ranks_.size()); }
  // Rank r's trainer: its device, model and predictions (its own collectives need every rank: fit and
  // evaluate here).
  Trainer& rank(int r) { return *ranks_.at(size_t(r)); }

 private:
  std::vector<World> worlds_;
  double timeout_seconds_;  // the collectives' (distributed.timeout_seconds)
  std::vector<std::unique_ptr<Trainer>> ranks_;
  bool fitting_ = false;  // fit() is running: its collectives may not be joined by another call
};

// Picks the device for a preference list ("cuda:1", "vulkan", "cpu") under a fallback policy ("next":
// the first that can run; "error": the first or nothing). Throws BackendUnavailable with the reasons.
Device select_device(Engine& engine, std::vector<std::string> preferences, const std::string& fallback);

}  // namespace kestrel
