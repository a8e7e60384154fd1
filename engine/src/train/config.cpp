// Reading run configs with the same care as model files: every mistake names the JSON path.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kestrel/config.h"
#include "kestrel/io.h"

namespace kestrel {

namespace {

// Typed access to one JSON object of the config; unknown keys are errors (usually typos).
class Section {
 public:
  Section(const nlohmann::json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object, got {}", where_, object_.dump()));
  }
  const nlohmann::json* get(const std::string& key) {
    known_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& expected, const nlohmann::json& got) const {
    throw ConfigError(fmt::format("{}/{}: expected {}, got {}", where_, key, expected, got.dump()));
  }
  void string(const std::string& key, std::string& out) {
    if (auto* v = get(key)) {
      if (!v->is_string()) fail(key, "a string", *v);
      out = v->get<std::string>();
    }
  }
  // One of `names`, stored as the name, or (kind) as its position, for an enum listed in the names' order.
  template <size_t N>
  void string(const std::string& key, std::string& out, const char* const (&names)[N]) {
    if (const char* const* name = one_of(key, names)) out = *name;
  }
  template <class Kind, size_t N>
  void kind(const std::string& key, Kind& out, const char* const (&names)[N]) {
    if (const char* const* name = one_of(key, names)) out = static_cast<Kind>(name - names);
  }
  template <class T>
  void integer(const std::string& key, T& out, int64_t min) {
    if (auto* v = get(key)) {
      if (!v->is_number_integer() || v->get<int64_t>() < min) fail(key, fmt::format("an integer >= {}", min), *v);
      out = static_cast<T>(v->get<int64_t>());
    }
  }
  void number(const std::string& key, double& out, double min, double max) {
    if (auto* v = get(key)) {
      if (!v->is_number() || v->get<double>() < min || v->get<double>() > max)
        fail(key, fmt::format("a number in [{}, {}]", min, max), *v);
      out = v->get<double>();
    }
  }
  void boolean(const std::string& key, bool& out) {
    if (auto* v = get(key)) {
      if (!v->is_boolean()) fail(key, "true or false", *v);
      out = v->get<bool>();
    }
  }
  void numbers(const std::string& key, std::vector<double>& out) {
    if (auto* v = get(key)) {
      if (v->is_number()) return out.assign(1, v->get<double>());
      if (!v->is_array()) fail(key, "a number or an array of numbers", *v);
      out.clear();
      for (const auto& x : *v) {
        if (!x.is_number()) fail(key, "a number or an array of numbers", *v);
        out.push_back(x.get<double>());
      }
    }
  }
  void shape(const std::string& key, Shape& out) {
    if (auto* v = get(key)) {
      if (!v->is_array()) fail(key, "an array of positive integers", *v);
      out.clear();
      for (const auto& x : *v) {
        if (!x.is_number_integer() || x.get<int64_t>() < 1) fail(key, "an array of positive integers", *v);
        out.push_back(x.get<int64_t>());
      }
    }
  }
  Section child(const std::string& key) {
    static const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json* v = get(key);
    return Section(v ? *v : empty, where_ + "/" + key);
  }
  bool has(const std::string& key) const { return object_.contains(key); }
  void finish() const {
    for (const auto& [key, value] : object_.items())
      if (!known_.count(key))
        throw ConfigError(fmt::format("{}/{}: unknown key; valid keys here: {}", where_, key, fmt::join(known_, ", ")));
  }

 private:
  // The entry of `names` the key's value equals; nullptr when the key is absent.
  template <size_t N>
  const char* const* one_of(const std::string& key, const char* const (&names)[N]) {
    const nlohmann::json* v = get(key);
    if (!v) return nullptr;
    for (const char* const& name : names)
      if (v->is_string() && v->get<std::string>() == name) return &name;
    fail(key, fmt::format("one of {}", fmt::join(names, ", ")), *v);
  }

  const nlohmann::json& object_;
  std::string where_;
  std::set<std::string> known_;
};

}  // namespace

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
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(fmt::format("{}: invalid JSON: {}", source, e.what()));
  }
  RunConfig c;
  c.source = source;
  Section top(doc, source + ": ");
  std::string model;
  top.string("model", model);
  if (model.empty()) throw ConfigError(fmt::format("{}: /model: name the model file (relative to this config)", source));
  namespace fs = std::filesystem;
  c.model_path = fs::path(model).is_absolute() ? model : (fs::path(source).parent_path() / model).lexically_normal().string();
  top.get("$schema");
  top.get("description");

  Section data = top.child("data");
  static constexpr const char* datasets[] = {"fashion-mnist", "synthetic", "synthetic-regression", "csv"};
  data.string("dataset", c.data.dataset, datasets);
  data.string("path", c.data.path);
  data.numbers("mean", c.data.mean);
  data.numbers("std", c.data.std);
  data.integer("train_subset", c.data.train_subset, 0);
  data.integer("test_subset", c.data.test_subset, 0);
  data.integer("workers", c.data.workers, 1);
  data.integer("train_samples", c.data.train_samples, 1);
  data.integer("test_samples", c.data.test_samples, 0);
  data.integer("classes", c.data.classes, 2);
  data.shape("input_shape", c.data.input_shape);
  data.integer("out_features", c.data.out_features, 0);
  data.string("train_file", c.data.train_file);
  data.string("test_file", c.data.test_file);
  data.integer("target_column", c.data.target_column, -1000);
  data.boolean("classification", c.data.classification);
  data.integer("target_columns", c.data.target_columns, 1);
  data.finish();
  auto relative = [&](std::string& file) {
    if (!file.empty() && fs::path(file).is_relative()) file = (fs::path(source).parent_path() / file).lexically_normal().string();
  };
  relative(c.data.train_file);
  relative(c.data.test_file);
  if (c.data.dataset == "csv" && c.data.train_file.empty())
    throw ConfigError(fmt::format("{}: /data/train_file: a csv dataset needs a train_file", source));

  top.kind("loss", c.loss, loss_kind_names);

  Section opt = top.child("optimizer");
  opt.kind("type", c.optimizer.type, optimizer_kind_names);
  opt.number("lr", c.optimizer.lr, 0, 10);
  std::vector<double> betas;
  opt.numbers("betas", betas);
  if (!betas.empty()) {
    if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1)
      throw ConfigError(fmt::format("{}: /optimizer/betas: expected [beta1, beta2] in [0, 1)", source));
    c.optimizer.beta1 = betas[0];
    c.optimizer.beta2 = betas[1];
  }
  opt.number("eps", c.optimizer.eps, 0, 1);
  opt.number("weight_decay", c.optimizer.weight_decay, 0, 1);
  opt.number("momentum", c.optimizer.momentum, 0, 1);
  opt.number("dampening", c.optimizer.dampening, 0, 1);
  opt.boolean("nesterov", c.optimizer.nesterov);
  opt.finish();
  if (c.optimizer.type == OptimizerKind::adamw && !doc["optimizer"].contains("weight_decay")) c.optimizer.weight_decay = 0.01;  // torch's default

  Section schedule = top.child("schedule");
  schedule.kind("type", c.schedule.type, schedule_kind_names);
  schedule.integer("step_size", c.schedule.step_size, 1);
  schedule.number("gamma", c.schedule.gamma, 0, 1);
  schedule.integer("warmup_steps", c.schedule.warmup_steps, 0);
  schedule.number("min_lr", c.schedule.min_lr, 0, 10);
  schedule.finish();

  top.integer("batch_size", c.batch_size, 1);
  top.integer("epochs", c.epochs, 1);
  top.integer("max_steps", c.max_steps, 0);
  top.integer("seed", c.seed, 0);
  top.boolean("drop_last", c.drop_last);
  top.boolean("capture", c.capture);
  top.integer("log_every", c.log_every, 1);

  Section eval = top.child("eval");
  eval.integer("batch_size", c.eval_batch_size, 1);
  eval.finish();

  Section checkpoint = top.child("checkpoint");
  checkpoint.integer("every_steps", c.checkpoint_every, 0);
  checkpoint.integer("keep", c.keep_checkpoints, 1);
  checkpoint.finish();

  Section backend = top.child("backend");
  if (auto* pref = backend.get("preference")) {
    if (!pref->is_array() || pref->empty()) backend.fail("preference", "a non-empty array of backend names", *pref);
    c.backends.clear();
    for (const auto& name : *pref) {
      if (!name.is_string()) backend.fail("preference", "a non-empty array of backend names", *pref);
      c.backends.push_back(name.get<std::string>());
    }
  }
  static constexpr const char* fallbacks[] = {"next", "error"};
  backend.string("fallback", c.fallback, fallbacks);
  backend.finish();

  top.string("out", c.out_dir);
  if (!c.out_dir.empty() && fs::path(c.out_dir).is_relative())  // like the model path: relative to this file
    c.out_dir = (fs::path(source).parent_path() / c.out_dir).lexically_normal().string();
  top.finish();
  return c;
}

}  // namespace kestrel
