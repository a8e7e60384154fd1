#include "json_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "kestrel/error.h"

namespace kestrel {

JsonReader::JsonReader(const nlohmann::json& object, std::string where, Raise raise, std::string subject)
    : object_(object), where_(std::move(where)), subject_(std::move(subject)), raise_(raise) {
  if (!object_.is_object()) raise_(fmt::format("{}: expected a JSON object, got {}", where_, object_.dump()));
}

std::string JsonReader::integer_words(int64_t min, int64_t max) {
  return max == no_max ? fmt::format("an integer >= {}", min) : fmt::format("an integer from {} to {}", min, max);
}

std::string JsonReader::pair_words(int64_t min, int64_t max) {
  return integer_words(min, max) + " or a pair [h, w] of them";
}

std::string JsonReader::number_words(double min, double max, bool max_exclusive) {
  return fmt::format("a number in [{}, {}{}", min, max, max_exclusive ? ")" : "]");
}

void JsonReader::fail(const std::string& key, const std::string& message) const {
  std::string text = fmt::format("{}/{}: {}", where_, key, message);
  raise_(text);
  throw InvalidArgument(text);  // raise_ should not return
}

void JsonReader::fail(const std::string& key, const std::string& expected, const nlohmann::json& got) const {
  if (subject_.empty()) fail(key, fmt::format("expected {}, got {}", expected, got.dump()));
  fail(key, fmt::format("{} expects {}, got {}", subject_, expected, got.dump()));
}

const nlohmann::json* JsonReader::get(const std::string& key) {
  if (std::find(listed_.begin(), listed_.end(), key) == listed_.end()) listed_.push_back(key);
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

void JsonReader::allow(std::initializer_list<const char*> keys) { allowed_.insert(allowed_.end(), keys.begin(), keys.end()); }

void JsonReader::require(const std::string& key, const std::string& what) {
  if (!object_.contains(key)) fail(key, fmt::format("{} needs '{}' ({})", subject_, key, what));
}

bool JsonReader::integer_in(const nlohmann::json& v, int64_t min, int64_t max) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return max >= 0 && u <= uint64_t(max) && (min <= 0 || u >= uint64_t(min));
  }
  const int64_t x = v.get<int64_t>();
  return x >= min && x <= max;
}

std::pair<int64_t, int64_t> JsonReader::pair(const std::string& key, std::pair<int64_t, int64_t> fallback, int64_t min,
                                             int64_t max) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (integer_in(*v, min, max)) return {v->get<int64_t>(), v->get<int64_t>()};
  if (!v->is_array() || v->size() != 2 || !integer_in((*v)[0], min, max) || !integer_in((*v)[1], min, max))
    fail(key, pair_words(min, max), *v);
  return {(*v)[0].get<int64_t>(), (*v)[1].get<int64_t>()};
}

double JsonReader::number(const std::string& key, double fallback, double min, double max, bool max_exclusive) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  const double x = v->is_number() ? v->get<double>() : NAN;
  if (!(x >= min && (max_exclusive ? x < max : x <= max))) fail(key, number_words(min, max, max_exclusive), *v);
  return x;
}

bool JsonReader::boolean(const std::string& key, bool fallback) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, boolean_words(), *v);
  return v->get<bool>();
}

std::string JsonReader::string(const std::string& key, std::string fallback) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, "a string", *v);
  return v->get<std::string>();
}

const char* const* JsonReader::one_of(const std::string& key, const char* const* names, size_t count) {
  const nlohmann::json* v = get(key);
  if (!v) return nullptr;
  for (size_t i = 0; i < count; ++i)
    if (v->is_string() && v->get<std::string>() == names[i]) return names + i;
  fail(key, fmt::format("one of {}", fmt::join(names, names + count, ", ")), *v);
}

std::string JsonReader::choice_words(const std::vector<std::string>& names) {
  return fmt::format("one of {}", fmt::join(names, ", "));
}

std::string JsonReader::choice(const std::string& key, std::string fallback, const std::vector<std::string>& names) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (!v->is_string() || std::find(names.begin(), names.end(), v->get<std::string>()) == names.end())
    fail(key, choice_words(names), *v);
  return v->get<std::string>();
}

std::vector<double> JsonReader::numbers(const std::string& key, std::vector<double> fallback) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (v->is_number()) return {v->get<double>()};
  auto number = [](const nlohmann::json& x) { return x.is_number(); };
  if (!v->is_array() || !std::all_of(v->begin(), v->end(), number)) fail(key, "a number or an array of numbers", *v);
  return v->get<std::vector<double>>();
}

Shape JsonReader::shape(const std::string& key, Shape fallback) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  auto positive = [](const nlohmann::json& x) { return integer_in(x, 1, no_max); };
  if (!v->is_array() || !std::all_of(v->begin(), v->end(), positive)) fail(key, "an array of positive integers", *v);
  return v->get<Shape>();
}

std::vector<std::string> JsonReader::strings(const std::string& key, std::vector<std::string> fallback,
                                             const std::string& what) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  auto string = [](const nlohmann::json& x) { return x.is_string(); };
  if (!v->is_array() || v->empty() || !std::all_of(v->begin(), v->end(), string)) fail(key, what, *v);
  return v->get<std::vector<std::string>>();
}

JsonReader JsonReader::child(const std::string& key) {
  static const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json* v = get(key);
  return JsonReader(v ? *v : empty, where_ + "/" + key, raise_, subject_);
}

void JsonReader::finish() const {
  for (const auto& [key, value] : object_.items()) {
    if (std::find(listed_.begin(), listed_.end(), key) != listed_.end()) continue;
    if (std::find(allowed_.begin(), allowed_.end(), key) != allowed_.end()) continue;
    std::string valid = listed_.empty() ? std::string("none") : fmt::format("{}", fmt::join(listed_, ", "));
    if (subject_.empty()) fail(key, fmt::format("unknown key; valid keys here: {}", valid));
    fail(key, fmt::format("unknown argument '{}' for {}; valid arguments: {}", key, subject_, valid));
  }
}

}  // namespace kestrel
