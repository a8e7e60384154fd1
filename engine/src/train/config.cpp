// Reading run configs with the same care as model files: every mistake names the JSON path.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <sstream>
#include <nlohmann/json.hpp>

#include "kestrel/config.h"
#include "kestrel/io.h"
#include "../io/json_reader.h"
#include "../io/json_text.h"

namespace kestrel {

namespace {
void raise_config_error(const std::string& message) { throw ConfigError(message); }
}  // namespace

int64_t RunConfig::micro_batch_size() const {
  if (accumulate_steps < 1 || batch_size % accumulate_steps != 0)
    throw ConfigError(fmt::format("{}: /accumulate_steps: {} micro-batches do not divide /batch_size ({}) into equal "
                                  "parts; give a divisor of the batch size (the micro-batch is batch_size / "
                                  "accumulate_steps samples)",
                                  source, accumulate_steps, batch_size));
  return batch_size / accumulate_steps;
}

namespace {

std::vector<std::string> comma_separated_items(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

}  // namespace

void RunConfig::set_backends(const std::string& comma_separated) {
  backends = comma_separated_items(comma_separated);
  if (backends.empty()) backends = {"auto"};
  fallback = backends.size() == 1 && backends.front() != "auto" ? "error" : "next";
}

void RunConfig::set_devices(const std::string& comma_separated) { distributed.devices = comma_separated_items(comma_separated); }

void RunConfig::set_accumulate_steps(int64_t steps) {
  accumulate_steps = steps;
  fit_memory = false;
}

void RunConfig::check() const {
  auto refuse = [&](const char* path, const std::string& value, const std::string& wanted) {
    throw ConfigError(fmt::format("{}: {}: {} is out of range; give {} (in the run config, or the flag or setting that "
                                  "overrides it)",
                                  source, path, value, wanted));
  };
  auto at_least = [&](const char* path, int64_t value, int64_t least) {
    if (value < least) refuse(path, std::to_string(value), fmt::format("an integer >= {}", least));
  };
  auto within = [&](const char* path, double value, double low, double high) {
    if (!(value >= low && value <= high)) refuse(path, fmt::format("{}", value), fmt::format("a number in [{}, {}]", low, high));
  };
  at_least("/batch_size", batch_size, 1);
  if (batch_size > kMaxBatchSize) refuse("/batch_size", std::to_string(batch_size), fmt::format("at most {}", kMaxBatchSize));
  at_least("/epochs", epochs, 1);
  at_least("/max_steps", max_steps, 0);
  at_least("/eval/batch_size", eval_batch_size, 1);
  if (eval_batch_size > kMaxBatchSize)
    refuse("/eval/batch_size", std::to_string(eval_batch_size), fmt::format("at most {}", kMaxBatchSize));
  at_least("/checkpoint/every_steps", checkpoint_every, 0);
  at_least("/checkpoint/keep", keep_checkpoints, 1);
  at_least("/data/train_subset", data.train_subset, 0);
  at_least("/data/test_subset", data.test_subset, 0);
  at_least("/data/workers", data.workers, 1);
  if (data.workers > kMaxLoaderWorkers) refuse("/data/workers", std::to_string(data.workers), fmt::format("at most {}", kMaxLoaderWorkers));
  within("/optimizer/lr", optimizer.lr, 0, kMaxLearningRate);
  within("/optimizer/weight_decay", optimizer.weight_decay, 0, 1);  // the parser's range, for the APIs' settings
  within("/optimizer/clip_grad_norm", optimizer.clip_grad_norm, 0, kMaxClipNorm);
  if (optimizer.clip_grad_norm > 0 && optimizer.clip_grad_norm < kMinClipNorm)  // f32 would flush it to 0
    refuse("/optimizer/clip_grad_norm", fmt::format("{}", optimizer.clip_grad_norm),
           fmt::format("0 (no clipping) or at least {}", kMinClipNorm));
  within("/distributed/bucket_cap_mb", distributed.bucket_cap_mb, 0.001, 1 << 16);
  within("/distributed/timeout_seconds", distributed.timeout_seconds, 0.1, 86400);
  if (backends.empty()) throw ConfigError(fmt::format("{}: /backend/preference: name at least one backend", source));
  if (!fit_memory) at_least("/accumulate_steps", accumulate_steps, 1);
  if (!fit_memory) micro_batch_size();
  if (distributed.deterministic && (accumulate_steps != 1 || fit_memory))
    throw ConfigError(fmt::format("{}: /distributed/deterministic: the batch is cut into /distributed/shards micro-shards "
                                  "there; leave accumulate_steps at 1",
                                  source));
}

RunConfig RunConfig::load(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path, io::kMaxTextFileBytes);
  } catch (const InvalidArgument& e) {
    throw ConfigError(e.what());
  }
  return parse(text, path);
}

RunConfig RunConfig::parse(const std::string& text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = io::parse_json(text, source);
  } catch (const InvalidArgument& e) {
    throw ConfigError(e.what());
  }
  RunConfig c;
  c.source = source;
  JsonReader top(doc, source + ": ", raise_config_error);
  std::string model = top.string("model", "");
  if (model.empty()) throw ConfigError(fmt::format("{}: /model: name the model file (relative to this config)", source));
  namespace fs = std::filesystem;
  c.model_path = fs::path(model).is_absolute() ? model : (fs::path(source).parent_path() / model).lexically_normal().string();
  top.get("$schema");
  top.get("description");

  JsonReader data = top.child("data");
  DataConfig& d = c.data;
  static constexpr const char* datasets[] = {"fashion-mnist", "synthetic", "synthetic-regression", "csv", "text"};
  d.dataset = data.string("dataset", d.dataset, datasets);
  d.path = data.string("path", d.path);
  d.mean = data.numbers("mean", d.mean);
  d.std = data.numbers("std", d.std);
  d.train_subset = data.integer("train_subset", d.train_subset, 0);
  d.test_subset = data.integer("test_subset", d.test_subset, 0);
  d.workers = data.integer("workers", d.workers, 1, kMaxLoaderWorkers);
  d.train_samples = data.integer("train_samples", d.train_samples, 1);
  d.test_samples = data.integer("test_samples", d.test_samples, 0);
  d.classes = data.integer("classes", d.classes, 2);
  d.input_shape = data.shape("input_shape", d.input_shape);
  d.out_features = data.integer("out_features", d.out_features, 0);
  d.train_file = data.string("train_file", d.train_file);
  d.test_file = data.string("test_file", d.test_file);
  d.target_column = data.integer("target_column", d.target_column, -1000);
  d.classification = data.boolean("classification", d.classification);
  d.target_columns = data.integer("target_columns", d.target_columns, 1);
  d.exclude = data.strings("exclude", d.exclude, "a non-empty array of file name patterns");
  static constexpr const char* tokenizers[] = {"char", "byte"};
  d.tokenizer = data.string("tokenizer", d.tokenizer, tokenizers);
  d.context = data.integer("context", d.context, 1, int64_t(1) << 24);
  d.validation_fraction = data.number("validation_fraction", d.validation_fraction, 0, 0.5);
  static constexpr const char* tasks[] = {"next_token", "categories"};
  d.task = data.string("task", d.task, tasks);
  d.categories = data.strings("categories", d.categories, "a non-empty array of file names (the classes)");
  d.separator = data.string("separator", d.separator);
  d.balance = data.boolean("balance", d.balance);
  data.finish();
  if (d.task == "categories" && d.categories.size() < 2)
    throw ConfigError(fmt::format("{}: /data/categories: the categories task needs at least two file names, one per "
                                  "class",
                                  source));
  if (d.task == "categories" && d.tokenizer == "byte")
    throw ConfigError(fmt::format("{}: /data/tokenizer: the categories task pads short documents with id 0, which the "
                                  "byte tokenizer gives to the NUL byte; use \"char\", whose id 0 is kept for padding",
                                  source));
  if (d.separator.empty() || d.separator.find('\n') != std::string::npos)
    throw ConfigError(fmt::format("{}: /data/separator: give the text of a separator line (not empty, one line)", source));
  auto relative = [&](std::string& file) {
    if (!file.empty() && fs::path(file).is_relative()) file = (fs::path(source).parent_path() / file).lexically_normal().string();
  };
  relative(d.train_file);
  relative(d.test_file);
  if (d.dataset == "text") relative(d.path);
  if (d.dataset == "text" && d.path.empty())
    throw ConfigError(fmt::format("{}: /data/path: a text dataset needs the path of a UTF-8 file or folder", source));
  if (d.dataset == "text" && d.validation_fraction == 0)
    throw ConfigError(fmt::format("{}: /data/validation_fraction: a text dataset holds out a part of every file; give "
                                  "a fraction above 0",
                                  source));
  if (d.dataset == "csv" && d.train_file.empty())
    throw ConfigError(fmt::format("{}: /data/train_file: a csv dataset needs a train_file", source));

  c.loss = top.kind("loss", c.loss, loss_kind_names);

  JsonReader opt = top.child("optimizer");
  OptimizerConfig& o = c.optimizer;
  o.type = opt.kind("type", o.type, optimizer_kind_names);
  o.lr = opt.number("lr", o.lr, 0, kMaxLearningRate);
  std::vector<double> betas = opt.numbers("betas", {});
  if (!betas.empty()) {
    if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1)
      throw ConfigError(fmt::format("{}: /optimizer/betas: expected [beta1, beta2] in [0, 1)", source));
    o.beta1 = betas[0];
    o.beta2 = betas[1];
  }
  o.eps = opt.number("eps", o.eps, 0, 1);
  if (o.type == OptimizerKind::adamw) o.weight_decay = 0.01;  // torch's default for AdamW, unless given
  o.weight_decay = opt.number("weight_decay", o.weight_decay, 0, 1);
  o.momentum = opt.number("momentum", o.momentum, 0, 1);
  o.dampening = opt.number("dampening", o.dampening, 0, 1);
  o.nesterov = opt.boolean("nesterov", o.nesterov);
  o.clip_grad_norm = opt.number("clip_grad_norm", o.clip_grad_norm, 0, kMaxClipNorm);
  opt.finish();

  JsonReader schedule = top.child("schedule");
  ScheduleConfig& sc = c.schedule;
  sc.type = schedule.kind("type", sc.type, schedule_kind_names);
  sc.step_size = schedule.integer("step_size", sc.step_size, 1);
  sc.gamma = schedule.number("gamma", sc.gamma, 0, 1);
  sc.warmup_steps = schedule.integer("warmup_steps", sc.warmup_steps, 0);
  sc.min_lr = schedule.number("min_lr", sc.min_lr, 0, kMaxLearningRate);
  schedule.finish();

  c.batch_size = top.integer("batch_size", c.batch_size, 1);
  if (const nlohmann::json* steps = top.get("accumulate_steps"); steps && *steps == "auto")
    c.fit_memory = true;  // the trainer picks the count from its memory plan
  else
    c.accumulate_steps = top.integer("accumulate_steps", c.accumulate_steps, 1);
  c.activation_checkpointing = top.strings("activation_checkpointing", c.activation_checkpointing,
                                           "a non-empty array of layer names or types");
  c.epochs = top.integer("epochs", c.epochs, 1);
  c.max_steps = top.integer("max_steps", c.max_steps, 0);
  c.seed = top.integer("seed", c.seed, 0);
  c.drop_last = top.boolean("drop_last", c.drop_last);
  c.capture = top.boolean("capture", c.capture);
  // At most 2^24: the device counts a window's steps in f32 (MetricsWindow), exact that far.
  c.log_every = top.integer("log_every", c.log_every, 1, int64_t(1) << 24);
  c.nonfinite_loss = top.kind("nonfinite_loss", c.nonfinite_loss, nonfinite_loss_names);
  c.detect_anomaly = top.boolean("detect_anomaly", c.detect_anomaly);
  c.precision = parse_dtype(top.string("precision", std::string(dtype_name(c.precision)), precision_names));
  JsonReader scaling = top.child("loss_scale");
  LossScaleConfig& ls = c.loss_scale;
  ls.init_scale = scaling.number("init_scale", ls.init_scale, 1, 1e30);
  ls.growth_factor = scaling.number("growth_factor", ls.growth_factor, 1, 1e6);
  ls.backoff_factor = scaling.number("backoff_factor", ls.backoff_factor, 1e-6, 1, true);
  ls.growth_interval = scaling.integer("growth_interval", ls.growth_interval, 1);
  scaling.finish();

  JsonReader eval = top.child("eval");
  c.eval_batch_size = eval.integer("batch_size", c.eval_batch_size, 1);
  eval.finish();

  JsonReader checkpoint = top.child("checkpoint");
  c.checkpoint_every = checkpoint.integer("every_steps", c.checkpoint_every, 0);
  c.keep_checkpoints = checkpoint.integer("keep", c.keep_checkpoints, 1);
  checkpoint.finish();

  JsonReader backend = top.child("backend");
  c.backends = backend.strings("preference", c.backends, "a non-empty array of backend names");
  static constexpr const char* fallbacks[] = {"next", "error"};
  c.fallback = backend.string("fallback", c.fallback, fallbacks);
  backend.finish();

  JsonReader distributed = top.child("distributed");
  c.distributed.bucket_cap_mb = distributed.number("bucket_cap_mb", c.distributed.bucket_cap_mb, 0.001, 1 << 16);
  c.distributed.timeout_seconds = distributed.number("timeout_seconds", c.distributed.timeout_seconds, 0.1, 86400);
  c.distributed.deterministic = distributed.boolean("deterministic", c.distributed.deterministic);
  c.distributed.shards = distributed.integer("shards", c.distributed.shards, 1, 1 << 16);
  c.distributed.shard_optimizer = distributed.boolean("shard_optimizer", c.distributed.shard_optimizer);
  c.distributed.devices = distributed.strings("devices", c.distributed.devices,
                                              "a non-empty array of devices, one per rank (\"cuda:0\", \"cuda:1\")");
  distributed.finish();

  c.out_dir = top.string("out", c.out_dir);
  if (!c.out_dir.empty() && fs::path(c.out_dir).is_relative())  // like the model path: relative to this file
    c.out_dir = (fs::path(source).parent_path() / c.out_dir).lexically_normal().string();
  top.finish();
  c.check();
  return c;
}

}  // namespace kestrel
