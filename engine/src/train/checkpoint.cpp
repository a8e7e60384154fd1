// Checkpoints: weights, buffers and optimizer state in a safetensors file, and the training state
// (epoch, batch, step, RNG offset, model fingerprint) in checkpoint.json pointing at it. Both files are
// written atomically, the weights first, so an interrupted save leaves the previous checkpoint whole.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kestrel/io.h"
#include "kestrel/trainer.h"
#include "metrics_window.h"
#include "train_state.h"

namespace kestrel {

namespace fs = std::filesystem;

namespace {
constexpr const char* state_format = "kestrel-train-state-1";
constexpr const char* weights_format = "kestrel-weights-1";

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw InvalidArgument(fmt::format("{}: unusable checkpoint: {}. Delete it (and the checkpoints/ folder) to start over, "
                                    "or resume from another one.",
                                    path, what));
}
}  // namespace

void Trainer::save_checkpoint(TrainState state, const MetricsWindow& metrics) {
  const std::string out = config_.out_dir;
  state.window = metrics.totals();
  const std::string name = fmt::format("checkpoints/step-{:09}.safetensors", state.step);
  std::vector<io::NamedTensor> tensors;
  for (auto& p : model_->parameters()) tensors.push_back(io::to_named(p.name, p.var.value()));
  for (auto& [buffer_name, tensor] : model_->buffers()) tensors.push_back(io::to_named(buffer_name, tensor));
  for (auto& [state_name, tensor] : optimizer_->state()) tensors.push_back(io::to_named(state_name, tensor));
  std::string bytes = io::encode_safetensors(
      tensors, {{"format", weights_format}, {"model", model_->spec().name()},
                {"model_fingerprint", model_->spec().fingerprint()}, {"step", std::to_string(state.step)}});
  io::write_file_atomically(out + "/" + name, bytes);

  nlohmann::json json{{"format", state_format},
                      {"weights", name},
                      {"weights_sha256", io::sha256_hex(bytes)},
                      {"model", model_->spec().source()},
                      {"model_fingerprint", model_->spec().fingerprint()},
                      {"config", config_.source},
                      {"epoch", state.epoch},
                      {"batch", state.batch},
                      {"step", state.step},
                      {"optimizer_steps", optimizer_->steps()},
                      {"rng_offset", state.rng_offset},
                      {"window", {{"loss", state.window.loss}, {"correct", state.window.correct},
                                  {"steps", state.window.steps}, {"samples", state.window.samples}}},
                      {"seed", config_.seed},
                      {"device", device_.str()}};
  io::write_file_atomically(out + "/checkpoint.json", json.dump(2) + "\n");

  // Keep the newest `keep_checkpoints` weight files.
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(out + "/checkpoints"))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + config_.keep_checkpoints < files.size(); ++i) fs::remove(files[i]);
}

void Trainer::load_tensors(const std::string& weights_path, const std::string& expected_sha256, bool with_optimizer) {
  std::string bytes = io::read_file(weights_path);
  if (!expected_sha256.empty() && io::sha256_hex(bytes) != expected_sha256)
    corrupt(weights_path, "its contents do not match the SHA-256 recorded in checkpoint.json (a torn or altered file)");
  io::SafetensorsFile file = io::decode_safetensors(bytes, weights_path);
  auto copy_into = [&](const std::string& name, Tensor target) {
    const io::NamedTensor* found = file.find(name);
    if (!found) corrupt(weights_path, fmt::format("it has no tensor '{}' (was it saved from another model?)", name));
    if (found->shape != target.shape() || found->dtype != target.dtype())
      corrupt(weights_path, fmt::format("'{}' is {} {} but the model needs {} {}", name, dtype_name(found->dtype),
                                        shape_str(found->shape), dtype_name(target.dtype()), shape_str(target.shape())));
    target.copy_from(io::to_tensor(*found, device_));
  };
  for (auto& p : model_->parameters()) copy_into(p.name, p.var.value());
  for (auto& [name, tensor] : model_->buffers()) copy_into(name, tensor);
  if (with_optimizer)
    for (auto& [name, tensor] : optimizer_->state()) copy_into(name, tensor);
}

TrainState Trainer::restore_checkpoint(const std::string& path) {
  std::string state_path = fs::is_directory(path) ? (fs::path(path) / "checkpoint.json").string() : path;
  if (!fs::exists(state_path))
    throw InvalidArgument(fmt::format("{}: no checkpoint to resume from; train without --resume first", state_path));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(io::read_file(state_path, io::kMaxTextFileBytes));
  } catch (const nlohmann::json::parse_error& e) {
    corrupt(state_path, fmt::format("invalid JSON ({})", e.what()));
  }
  TrainState state;
  try {
    if (json.at("format") != state_format) corrupt(state_path, fmt::format("unknown format {}", json.at("format").dump()));
    if (json.at("model_fingerprint") != model_->spec().fingerprint())
      corrupt(state_path, fmt::format("it was written for the model file {} as it was then, and {} is different now; "
                                      "resume with the same model file, or train anew into another --out folder",
                                      json.at("model").get<std::string>(), model_->spec().source()));
    state.epoch = json.at("epoch").get<int64_t>();
    state.batch = json.at("batch").get<int64_t>();
    state.step = json.at("step").get<int64_t>();
    state.rng_offset = json.at("rng_offset").get<uint64_t>();
    const auto& window = json.at("window");
    state.window.loss = window.at("loss").get<double>();
    state.window.correct = window.at("correct").get<double>();
    state.window.steps = window.at("steps").get<int64_t>();
    state.window.samples = window.at("samples").get<int64_t>();
    if (json.at("seed").get<uint64_t>() != config_.seed)
      corrupt(state_path, fmt::format("it was trained with seed {} but the config says {}", json.at("seed").get<uint64_t>(),
                                      config_.seed));
    optimizer_->set_steps(json.at("optimizer_steps").get<int64_t>());
    std::string weights = (fs::path(state_path).parent_path() / json.at("weights").get<std::string>()).string();
    load_tensors(weights, json.at("weights_sha256").get<std::string>(), true);
  } catch (const nlohmann::json::exception& e) {
    corrupt(state_path, fmt::format("a field is missing or has the wrong type ({})", e.what()));
  }
  return state;
}

void Trainer::load_weights(const std::string& path) {
  if (fs::path(path).extension() == ".json" || fs::is_directory(path)) {
    std::string state_path = fs::is_directory(path) ? (fs::path(path) / "checkpoint.json").string() : path;
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(io::read_file(state_path, io::kMaxTextFileBytes));
      load_tensors((fs::path(state_path).parent_path() / json.at("weights").get<std::string>()).string(),
                   json.at("weights_sha256").get<std::string>(), false);
    } catch (const nlohmann::json::exception& e) {
      corrupt(state_path, e.what());
    }
    return;
  }
  load_tensors(path, "", false);
}

}  // namespace kestrel
