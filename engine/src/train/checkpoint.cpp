// Checkpoints: weights, buffers and optimizer state in a safetensors file, and where the run stood in
// checkpoint.json (checkpoint_state) pointing at it. Both files are written atomically, the weights
// first, so an interrupted save leaves the previous checkpoint whole.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint_state.h"
#include "kestrel/io.h"
#include "kestrel/trainer.h"
#include "metrics_window.h"
#include "optimizer_shards.h"
#include "train_state.h"

namespace kestrel {

namespace fs = std::filesystem;

namespace {
constexpr const char* weights_format = "kestrel-weights-1";

// A path that cannot be examined (a loop of links, a name too long) is taken as a file: reading it
// then fails with a message naming it.
bool is_folder(const std::string& path) {
  std::error_code unreadable;
  return fs::is_directory(path, unreadable);
}

std::string state_file(const std::string& path) {
  return is_folder(path) ? (fs::path(path) / "checkpoint.json").string() : path;
}

CheckpointState read_state(const std::string& state_path) {
  return decode_checkpoint_state(io::read_file(state_path, io::kMaxTextFileBytes), state_path);
}

std::string weights_path(const std::string& state_path, const CheckpointState& state) {
  return (fs::path(state_path).parent_path() / state.weights).string();
}
}  // namespace

std::string clear_previous_run(const std::string& out_dir) {
  // Its weight files, checkpoint.json and TensorBoard files: left in place, the rotation would keep an
  // earlier, longer run's later weights over this run's, a --resume after an early kill would continue
  // the other run, and TensorBoard would draw both as one.
  int removed_weights = 0, removed_events = 0;
  std::error_code ignored;
  if (fs::is_directory(out_dir + "/checkpoints", ignored))
    for (const auto& entry : fs::directory_iterator(out_dir + "/checkpoints", ignored))
      if (entry.path().extension() == ".safetensors" && fs::remove(entry.path(), ignored)) ++removed_weights;
  if (fs::is_directory(out_dir, ignored))
    for (const auto& entry : fs::directory_iterator(out_dir, ignored))
      if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && fs::remove(entry.path(), ignored))
        ++removed_events;
  const bool had_state = fs::remove(out_dir + "/checkpoint.json", ignored);
  if (!had_state && !removed_weights && !removed_events) return "";
  return fmt::format("kestrel: {} held an earlier run; starting anew replaced its checkpoint ({} weight file{}) and "
                     "TensorBoard events (--resume continues a run instead)",
                     out_dir, removed_weights, removed_weights == 1 ? "" : "s");
}

void Trainer::check_vocabulary(const std::string& path, const std::string& vocabulary_sha256) const {
  if (vocabulary_sha256 != (vocabulary_ ? vocabulary_->fingerprint() : ""))
    unusable_checkpoint(path, "it was trained on token ids of another vocabulary than this run's data gives (the "
                              "corpus, its files or the tokenizer changed); use it with the data it was trained on, or "
                              "train anew into another --out folder");
}

void Trainer::check_written_for_this_run(const std::string& state_path, const CheckpointState& saved,
                                         const std::string& otherwise) const {
  if (saved.model_fingerprint != model_->spec().fingerprint())
    unusable_checkpoint(state_path, fmt::format("it was written for the model file {} as it was then, and {} is "
                                                "different now; use the model file it was trained with, or train anew "
                                                "into another --out folder{}",
                                                saved.model_source, model_->spec().source(), otherwise));
  check_vocabulary(state_path, saved.vocabulary_sha256);
}

void Trainer::save_checkpoint(TrainState state, const MetricsWindow& metrics) {
  const std::string out = config_.out_dir;
  state.window = metrics.totals();  // with data parallelism a collective: every rank comes here
  // The optimizer state whole, as one process has it: ZeRO-1's parts gathered (collectives too), so a
  // run may resume on any number of ranks.
  std::vector<std::pair<std::string, Tensor>> optimizer_state = optimizer_->state();
  if (shards_)
    for (auto& [state_name, tensor] : optimizer_state) tensor = shards_->gather(tensor, state_name).clone();
  if (group_) {  // every rank's dropout counter (a gather: every rank comes here), and the largest
    const Tensor mine = Tensor::full({1}, double(state.rng_offset), DType::i64, device_);  // below 2^53: exact
    Tensor all = Tensor::empty({group_->size()}, DType::i64, device_);
    group_->all_gather(mine, all, "the ranks' dropout counters");
    group_->wait(fmt::format("step {}: gathering the ranks' dropout counters for the checkpoint", state.step));
    state.rank_rng_offsets.clear();
    for (double offset : all.to_doubles()) state.rank_rng_offsets.push_back(uint64_t(offset));
    state.rng_offset = *std::max_element(state.rank_rng_offsets.begin(), state.rank_rng_offsets.end());
  }
  if (!world_.is_root()) return;    // rank 0 writes; the ranks' weights are the same
  CheckpointState saved;
  saved.train = state;
  saved.weights = weights_file_name(state.step);
  std::vector<io::NamedTensor> tensors;
  for (auto& p : model_->parameters()) tensors.push_back(io::to_named(p.name, p.var.value()));
  for (auto& [buffer_name, tensor] : model_->buffers()) tensors.push_back(io::to_named(buffer_name, tensor));
  for (auto& [state_name, tensor] : optimizer_state) tensors.push_back(io::to_named(state_name, tensor));
  std::map<std::string, std::string> metadata{{"format", weights_format},
                                              {"model", model_->spec().name()},
                                              {"model_fingerprint", model_->spec().fingerprint()},
                                              {"step", std::to_string(state.step)}};
  // What the token ids mean travels with the weights too: the file may be loaded on its own.
  if (vocabulary_) metadata["vocabulary_sha256"] = vocabulary_->fingerprint();
  std::string bytes = io::encode_safetensors(tensors, metadata);
  io::write_file_atomically(out + "/" + saved.weights, bytes);

  saved.weights_sha256 = io::sha256_hex(bytes);
  saved.model_source = model_->spec().source();
  saved.model_fingerprint = model_->spec().fingerprint();
  saved.vocabulary_sha256 = vocabulary_ ? vocabulary_->fingerprint() : "";
  saved.config_source = config_.source;
  saved.device = device_.str();
  saved.seed = config_.seed;
  // The optimizer counts loss-scaled updates it skipped (on the device) too; the file counts those made.
  saved.optimizer_steps = optimizer_->steps() - state.loss_scale.skipped_steps;
  io::write_file_atomically(out + "/checkpoint.json", encode_checkpoint_state(saved));

  // Keep the newest `keep_checkpoints` weight files.
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(out + "/checkpoints"))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  // In step order: names are zero-padded to 9 digits, so past 10^9 steps a longer name is a later step.
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    const std::string x = a.filename().string(), y = b.filename().string();
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  for (size_t i = 0; i + config_.keep_checkpoints < files.size(); ++i) fs::remove(files[i]);
}

void Trainer::load_tensors(const std::string& weights_path, const std::string& expected_sha256, bool with_optimizer) {
  std::string bytes = io::read_file(weights_path);
  if (!expected_sha256.empty() && io::sha256_hex(bytes) != expected_sha256)
    unusable_checkpoint(weights_path,
                        "its contents do not match the SHA-256 recorded in checkpoint.json (a torn or altered file)");
  io::SafetensorsFile file = io::decode_safetensors(bytes, weights_path);
  if (const auto vocabulary = file.metadata.find("vocabulary_sha256"); vocabulary != file.metadata.end())
    check_vocabulary(weights_path, vocabulary->second);
  // part: with ZeRO-1 the optimizer holds this rank's [begin, end) of each whole state tensor saved.
  auto copy_into = [&](const std::string& name, Tensor target, bool part = false) {
    const io::NamedTensor* found = file.find(name);
    if (!found)
      unusable_checkpoint(weights_path, fmt::format("it has no tensor '{}' (was it saved from another model?)", name));
    Shape whole = target.shape();
    if (part) whole = {model_->flat_parameters().numel()};
    if (found->shape != whole || found->dtype != target.dtype())
      unusable_checkpoint(weights_path,
                          fmt::format("'{}' is {} {} but the model needs {} {}", name, dtype_name(found->dtype),
                                      shape_str(found->shape), dtype_name(target.dtype()), shape_str(whole)));
    Tensor loaded = io::to_tensor(*found, device_);
    target.copy_from(part ? loaded.slice(0, shards_->begin(), shards_->end()) : loaded);
  };
  for (auto& p : model_->parameters()) copy_into(p.name, p.var.value());
  for (auto& [name, tensor] : model_->buffers()) copy_into(name, tensor);
  if (with_optimizer)
    for (auto& [name, tensor] : optimizer_->state()) copy_into(name, tensor, shards_ != nullptr);
}

TrainState Trainer::restore_checkpoint(const std::string& path, int64_t batches_per_epoch) {
  const std::string state_path = state_file(path);
  std::error_code unreadable;
  if (!fs::exists(state_path, unreadable) && !unreadable)
    throw InvalidArgument(fmt::format("{}: no checkpoint to resume from; train without --resume first", state_path));
  const CheckpointState saved = read_state(state_path);
  const TrainState& t = saved.train;
  check_written_for_this_run(state_path, saved, "");
  if (saved.seed != config_.seed)
    unusable_checkpoint(state_path,
                        fmt::format("it was trained with seed {} but the config says {}", saved.seed, config_.seed));
  // Where the run stood must be a place this run passes through: its epochs, its batches per epoch
  // (which the batch size and the data decide), one optimizer step per batch.
  if (t.epoch > config_.epochs || (t.epoch == config_.epochs && t.batch > 0))
    unusable_checkpoint(state_path, fmt::format("it stands in epoch {} but the run has {} epochs; raise epochs to "
                                                "continue it",
                                                t.epoch + 1, config_.epochs));
  if (t.batch > batches_per_epoch || t.step != t.epoch * batches_per_epoch + t.batch)
    unusable_checkpoint(state_path, fmt::format("step {} is not epoch {} x {} batches + batch {}: the batch size or "
                                                "the data changed since it was written (resume with the run config "
                                                "it was written with)",
                                                t.step, t.epoch, batches_per_epoch, t.batch));
  // Windows close at every epoch's end, so one holds at most the epoch's batches so far.
  int64_t most_samples = 0, most_correct = 0;
  if (t.window.steps > t.batch || __builtin_mul_overflow(t.window.steps, config_.batch_size, &most_samples) ||
      t.window.samples > most_samples ||
      __builtin_mul_overflow(t.window.samples, train_->is_classification() ? train_->target_numel() : 0, &most_correct) ||
      t.window.correct > double(most_correct))
    unusable_checkpoint(state_path, fmt::format("its metrics window counts {} samples ({} correct labels) in {} steps "
                                                "(of batches of at most {}) at batch {} of its epoch",
                                                t.window.samples, t.window.correct, t.window.steps, config_.batch_size,
                                                t.batch));
  optimizer_->set_steps(saved.optimizer_steps + t.loss_scale.skipped_steps);
  load_tensors(weights_path(state_path, saved), saved.weights_sha256, true);
  // Each rank goes on from its own dropout counter where the world has the ranks that wrote the checkpoint;
  // on another number of ranks, from the largest, past every rank's draws.
  TrainState resumed = t;
  if (group_ && t.rank_rng_offsets.size() == size_t(group_->size()))
    resumed.rng_offset = t.rank_rng_offsets[size_t(group_->rank())];
  return resumed;
}

void Trainer::load_weights(const std::string& path) {
  if (fs::path(path).extension() == ".json" || is_folder(path)) {
    const std::string state_path = state_file(path);
    const CheckpointState saved = read_state(state_path);
    check_written_for_this_run(state_path, saved,
                               fmt::format(" (to load its weights into the changed model anyway, name its weights "
                                           "file: {})",
                                           weights_path(state_path, saved)));
    load_tensors(weights_path(state_path, saved), saved.weights_sha256, false);
    return;
  }
  load_tensors(path, "", false);
}

}  // namespace kestrel
