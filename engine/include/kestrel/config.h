// Run configurations: which model, data, loss, optimizer, schedule, batch size, epochs, seed,
// evaluation, checkpointing and backend preference. Read from JSON; command-line flags override.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/error.h"
#include "kestrel/optim.h"
#include "kestrel/tensor.h"

namespace kestrel {

// A config that cannot be used: the message names the file and JSON path and what is expected.
class ConfigError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

struct DataConfig {
  std::string dataset = "fashion-mnist";  // "fashion-mnist", "synthetic", "synthetic-regression", "csv", "text"
  std::string path;                       // fashion-mnist folder (default: Debian's); text file or folder
  std::vector<double> mean, std;          // normalisation per channel; empty: none
  int64_t train_subset = 0, test_subset = 0;  // use only the first N samples (0: all)
  int workers = 2;
  // synthetic data
  int64_t train_samples = 1024, test_samples = 256, classes = 10;
  Shape input_shape;        // per sample (synthetic); default: the model's input shape
  int64_t out_features = 0; // synthetic-regression
  // csv
  std::string train_file, test_file;
  int target_column = -1;
  bool classification = true;
  int target_columns = 1;
  // text: a language-model corpus (see kestrel/text.h)
  std::vector<std::string> exclude;  // a folder's file names to skip ("*.dat")
  std::string tokenizer = "char";    // "char": the corpus's characters; "byte": bytes 0..255
  // Text data, set through the API (kestrel generate sets it from the run folder): the vocabulary from this
  // vocabulary.json, as a run wrote it, and no samples; the corpus is not read. For using a trained
  // language model (generation) where its corpus is not; a run that trains or evaluates needs the corpus.
  std::string vocabulary_file;
  int64_t context = 0;               // positions per sample (0: the model's input length)
  double validation_fraction = 0.1;  // the tail of each file, held out for evaluation
  // text, classifying documents by their file: "categories" names the files (the classes, in order)
  std::string task = "next_token";      // "next_token" (a language model) or "categories"
  std::vector<std::string> categories;  // file names in the folder `path`
  std::string separator = "%";          // a line holding only this ends a document
  bool balance = false;                 // as many documents of every class as the smallest has
};

// The largest learning rate a run config or --lr accepts (and min_lr): far above any useful one.
inline constexpr double kMaxLearningRate = 10;
inline constexpr double kMaxClipNorm = 1e9;  // optimizer.clip_grad_norm's largest value
inline constexpr double kMinClipNorm = 1e-30;  // and its smallest but 0, well inside f32's range
// The largest batch a run config or a flag accepts (2^40 samples): far above any that fits, and small
// enough that sizes computed from it stay inside 64 bits.
inline constexpr int64_t kMaxBatchSize = int64_t(1) << 40;
// The most data loader threads a run may ask for ("data": {"workers"}): a few per core is plenty, and
// thousands would take the machine's thread limit.
inline constexpr int kMaxLoaderWorkers = 256;

// What a training run does when its loss becomes NaN or infinite: stop (with an error naming the step,
// exit status 3 from the CLI, the last checkpoint left as it was) or go on, saying so once.
enum class NonFiniteLoss { stop, keep_going };
inline constexpr const char* nonfinite_loss_names[] = {"stop", "continue"};  // in NonFiniteLoss's order
// "precision": the dtype of the products (fn::AutocastScope); f32 turns mixed precision off.
inline constexpr const char* precision_names[] = {"f32", "bf16", "f16"};

// f16's dynamic loss scaling ("loss_scale"), with torch.cuda.amp.GradScaler's names and defaults: the
// loss is multiplied by the scale before backward, so small gradients survive f16; a step whose gradients
// overflowed is skipped and the scale multiplied by backoff_factor; after growth_interval steps in a row
// without overflow it is multiplied by growth_factor.
struct LossScaleConfig {
  double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

enum class LossKind { cross_entropy, mse };
inline constexpr const char* loss_kind_names[] = {"cross_entropy", "mse"};  // in LossKind's order

// Data-parallel training: several processes, each taking its share of every batch (kestrel/distributed.h).
struct DistributedConfig {
  double bucket_cap_mb = 25;    // gradients are summed over the ranks in buckets of about this size (DDP's)
  double timeout_seconds = 60;  // how long one collective waits for the other ranks before the run stops
  // Deterministic mode: the global batch is cut into `shards` equal micro-shards, each with a gradient of
  // its own, summed in shard order; parameters are then bit-identical on one process and on any number of
  // ranks dividing `shards` (each rank holds every shard's gradient while summing: shards x parameters).
  bool deterministic = false;
  int64_t shards = 8;
  // ZeRO stage 1: each rank keeps the optimizer state of 1/N of the parameters and updates those; the
  // ranks then all-gather the parameters.
  bool shard_optimizer = false;
  // One process driving several devices ("cuda:0", "cuda:1"; "cpu:0", "cpu:1" with KESTREL_CPU_DEVICES),
  // a rank each on a thread of its own (MultiDeviceTrainer); empty: the backend preference's one device.
  std::vector<std::string> devices;
};

struct RunConfig {
  std::string source;      // the config file
  std::string model_path;  // resolved relative to the config file
  DataConfig data;
  LossKind loss = LossKind::cross_entropy;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  int64_t batch_size = 64;      // samples per optimizer step (over all ranks when data-parallel)
  // Micro-batches per optimizer step (gradient accumulation): each forward and backward sees
  // batch_size / accumulate_steps samples, so activation memory shrinks by that factor.
  int64_t accumulate_steps = 1;
  // "accumulate_steps": "auto" (or --fit): before training, the fewest micro-batches per step whose
  // step fits on the device by the memory plan (Trainer::plan_memory) replace accumulate_steps.
  bool fit_memory = false;
  // Layers (by name or type) whose activations are recomputed in backward instead of kept, each a
  // checkpointed segment of its own, e.g. ["transformer_encoder_layer"]; added to the model file's marks.
  std::vector<std::string> activation_checkpointing;
  int64_t epochs = 1;
  int64_t max_steps = 0;   // stop after this many optimizer steps (0: no limit)
  uint64_t seed = 42;
  int64_t eval_batch_size = 1000;
  bool drop_last = false;
  // Capture the training step after one warm-up step and replay it (when the backend offers capture).
  bool capture = true;
  int64_t log_every = 50;            // steps between metric records
  NonFiniteLoss nonfinite_loss = NonFiniteLoss::stop;
  // Check every op's output and gradient for NaN and infinity and stop at the first, naming it
  // (AnomalyModeGuard); steps then run eagerly, with a device read per op.
  bool detect_anomaly = false;
  // Mixed precision: linear layers, convolutions and attention's products in bf16 or f16 (with f32
  // master weights, gradients, optimizer and every other op; f16 with loss scaling); f32: off.
  DType precision = DType::f32;
  LossScaleConfig loss_scale;  // f16 only
  int64_t checkpoint_every = 0;      // steps between checkpoints (0: only at epoch ends)
  int keep_checkpoints = 2;
  std::vector<std::string> backends = {"auto"};  // preference order; "auto": highest priority
  std::string fallback = "next";     // "next": try the next preference; "error": only the first
  std::string out_dir;               // default: runs/<model name>
  DistributedConfig distributed;

  // batch_size / accumulate_steps; a ConfigError naming both keys when it does not divide.
  int64_t micro_batch_size() const;
  // The settings flags and the C and Python APIs may change after parsing, checked again as parsing
  // checks them (ranges, and rules between keys): a ConfigError naming the JSON path. The Trainer calls
  // it before it touches anything.
  void check() const;
  // Overrides as the command line's flags make them: a comma-separated backend preference ("cuda,cpu";
  // one name alone means that backend or an error, no fallback), devices of this process ("cuda:0,cuda:1"),
  // and a number of micro-batches, which replaces "accumulate_steps": "auto".
  void set_backends(const std::string& comma_separated);
  void set_devices(const std::string& comma_separated);
  void set_accumulate_steps(int64_t steps);

  static RunConfig load(const std::string& path);
  static RunConfig parse(const std::string& text, const std::string& source);
};

}  // namespace kestrel
