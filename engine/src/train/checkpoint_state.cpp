#include "checkpoint_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../io/json_reader.h"
#include "../io/json_text.h"
#include "kestrel/error.h"
#include "kestrel/io.h"

namespace kestrel {

namespace {

constexpr const char* kFormat = "kestrel-train-state-3";
// Format 2 is format 3 without vocabulary_sha256 (it predates text data), read as "no vocabulary".
constexpr const char* kFormatWithoutVocabulary = "kestrel-train-state-2";
constexpr const char* kAdvice =
    "Delete it (and the checkpoints/ folder) to start over, or resume from another one.";
// The captured step keeps the dropout counter in a double: exact to 2^53.
constexpr int64_t kMaxRngOffset = int64_t(1) << 53;
constexpr size_t kMaxCheckpointRanks = size_t(1) << 20;  // a rank's counter each

// Paths in the state need not be valid UTF-8; nlohmann's dump() would throw on them, so the digest and
// the file are both written with invalid bytes replaced (the same text on every dump).
std::string dump(const nlohmann::json& json, int indent = -1) {
  return json.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void raise_unusable(const std::string& message) {
  throw InvalidArgument(fmt::format("{}: this checkpoint is unusable. {}", message, kAdvice));
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

nlohmann::json to_json(const CheckpointState& s) {
  const TrainState& t = s.train;
  nlohmann::json json{{"format", kFormat},
          {"weights", s.weights},
          {"weights_sha256", s.weights_sha256},
          {"model", s.model_source},
          {"model_fingerprint", s.model_fingerprint},
          {"vocabulary_sha256", s.vocabulary_sha256},
          {"config", s.config_source},
          {"epoch", t.epoch},
          {"batch", t.batch},
          {"step", t.step},
          {"optimizer_steps", s.optimizer_steps},
          {"rng_offset", t.rng_offset},
          // A non-finite loss sum (a run told to continue past one) is written as null.
          {"window", {{"loss", std::isfinite(t.window.loss) ? nlohmann::json(t.window.loss) : nlohmann::json()},
                      {"correct", static_cast<int64_t>(t.window.correct)},
                      {"steps", t.window.steps},
                      {"samples", t.window.samples}}},
          {"seed", s.seed},
          {"device", s.device}};
  if (!t.rank_rng_offsets.empty()) json["rank_rng_offsets"] = t.rank_rng_offsets;  // data-parallel runs
  if (t.loss_scale.scale > 0)  // f16 runs: the loss scale goes on from where it was
    json["loss_scale"] = {{"scale", t.loss_scale.scale},
                          {"clean_steps", t.loss_scale.clean_steps},
                          {"skipped_steps", t.loss_scale.skipped_steps}};
  return json;
}

// Every field is required: a reader with a fallback would let a deleted field pass.
struct Required {
  JsonReader& reader;
  template <class T>
  T integer(const char* key, int64_t min, int64_t max = JsonReader::no_max) {
    reader.require(key, JsonReader::integer_words(min, max));
    return reader.integer<T>(key, 0, min, max);
  }
  std::string string(const char* key) {
    reader.require(key, "a string");
    return reader.string(key, "");
  }
};

}  // namespace

std::string weights_file_name(int64_t step) { return fmt::format("checkpoints/step-{:09}.safetensors", step); }

void unusable_checkpoint(const std::string& path, const std::string& what) {
  raise_unusable(fmt::format("{}: {}", path, what));
  std::abort();  // raise_unusable throws
}

std::string encode_checkpoint_state(const CheckpointState& state) {
  nlohmann::json json = to_json(state);
  json["state_sha256"] = io::sha256_hex(dump(json));
  return dump(json, 2) + "\n";
}

CheckpointState decode_checkpoint_state(const std::string& text, const std::string& path) {
  nlohmann::json json;
  try {
    json = io::parse_json(text, path);
  } catch (const InvalidArgument& e) {
    raise_unusable(e.what());
  }
  if (!json.is_object()) unusable_checkpoint(path, "expected a JSON object");
  JsonReader top(json, path + ": ", raise_unusable, "a checkpoint");
  Required need{top};

  const std::string format = need.string("format");
  if (format == "kestrel-train-state-1")
    unusable_checkpoint(path, "it was written by an earlier Kestrel, before checkpoints carried a digest over their "
                              "state; this version resumes only from checkpoints it can verify");
  if (format != kFormat && format != kFormatWithoutVocabulary) unusable_checkpoint(path, fmt::format("/format: unknown format '{}'", format));

  // The digest first: a field edited in range must not pass as a plausible run.
  const std::string digest = need.string("state_sha256");
  nlohmann::json covered = json;
  covered.erase("state_sha256");
  if (digest != io::sha256_hex(dump(covered)))
    unusable_checkpoint(path, "its contents do not match its state_sha256 (the file was edited or damaged)");

  CheckpointState s;
  TrainState& t = s.train;
  t.epoch = need.integer<int64_t>("epoch", 0);
  t.batch = need.integer<int64_t>("batch", 0);
  t.step = need.integer<int64_t>("step", 0);
  s.optimizer_steps = need.integer<int64_t>("optimizer_steps", 0, t.step);
  t.rng_offset = need.integer<uint64_t>("rng_offset", 0, kMaxRngOffset);
  s.seed = need.integer<uint64_t>("seed", 0);
  s.weights = need.string("weights");
  if (s.weights != weights_file_name(t.step))
    unusable_checkpoint(path, fmt::format("/weights: a checkpoint of step {} names {}, not '{}'", t.step,
                                          weights_file_name(t.step), s.weights));
  s.weights_sha256 = need.string("weights_sha256");
  if (!is_sha256_hex(s.weights_sha256))
    unusable_checkpoint(path, "/weights_sha256: expected 64 lowercase hex digits (the weights file's SHA-256)");
  s.model_source = need.string("model");
  s.model_fingerprint = need.string("model_fingerprint");
  if (format == kFormat) {
    s.vocabulary_sha256 = need.string("vocabulary_sha256");
    if (!s.vocabulary_sha256.empty() && !is_sha256_hex(s.vocabulary_sha256))
      unusable_checkpoint(path, "/vocabulary_sha256: expected empty (no vocabulary) or 64 lowercase hex digits");
  }
  s.config_source = need.string("config");
  s.device = need.string("device");

  top.require("window", "the open metrics window");
  JsonReader window = top.child("window");
  Required in_window{window};
  t.window.steps = in_window.integer<int64_t>("steps", 0, t.step);
  t.window.samples = in_window.integer<int64_t>("samples", t.window.steps);
  // Labels, not samples: a sequence has one per position (the run checks it against its data).
  t.window.correct = double(in_window.integer<int64_t>("correct", 0));
  window.require("loss", "the window's loss sum, or null");
  const nlohmann::json* loss = window.get("loss");
  if (loss->is_null()) {
    t.window.loss = NAN;
  } else {
    constexpr double big = std::numeric_limits<double>::max();
    t.window.loss = window.number("loss", 0, -big, big);
  }
  window.finish();
  if (const nlohmann::json* offsets = top.get("rank_rng_offsets")) {  // data-parallel runs only
    const std::string what = fmt::format("an array of each rank's dropout counter, integers from 0 to {}", kMaxRngOffset);
    if (!offsets->is_array() || offsets->empty() || offsets->size() > kMaxCheckpointRanks)
      top.fail("rank_rng_offsets", what, *offsets);
    for (const nlohmann::json& offset : *offsets) {
      const bool in_range = offset.is_number_unsigned() ? offset.get<uint64_t>() <= uint64_t(kMaxRngOffset)
                            : offset.is_number_integer() ? offset.get<int64_t>() >= 0 && offset.get<int64_t>() <= kMaxRngOffset
                                                          : false;
      if (!in_range) top.fail("rank_rng_offsets", what, *offsets);
      t.rank_rng_offsets.push_back(offset.get<uint64_t>());
    }
    if (t.rng_offset != *std::max_element(t.rank_rng_offsets.begin(), t.rank_rng_offsets.end()))
      unusable_checkpoint(path, "/rng_offset: not the largest of /rank_rng_offsets");
  }
  if (top.get("loss_scale")) {  // f16 runs only
    JsonReader scaling = top.child("loss_scale");
    Required in_scaling{scaling};
    scaling.require("scale", "the loss scale, a positive number");
    t.loss_scale.scale = scaling.number("scale", 0, 1e-30, 1e30);
    t.loss_scale.clean_steps = in_scaling.integer<int64_t>("clean_steps", 0, t.step);
    t.loss_scale.skipped_steps = in_scaling.integer<int64_t>("skipped_steps", 0, t.step - s.optimizer_steps);
    scaling.finish();
  }
  top.get("state_sha256");
  top.finish();
  return s;
}

}  // namespace kestrel
