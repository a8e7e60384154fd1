#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "layer.h"

namespace kestrel {

Args::Args(const nlohmann::json& object, std::string where, std::string type)
    : object_(object), where_(std::move(where)), type_(std::move(type)) {
  known_ = {"type", "name", "inputs"};
}

void Args::fail(const std::string& key, const std::string& message) const {
  throw ModelError(fmt::format("{}/{}: {}", where_, key, message));
}

const nlohmann::json* Args::take(const std::string& key) {
  known_.push_back(key);
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

int64_t Args::integer(const std::string& key, int64_t fallback, int64_t min) {
  const nlohmann::json* value = take(key);
  if (!value) return fallback;
  if (!value->is_number_integer()) fail(key, fmt::format("{} expects an integer >= {}, got {}", type_, min, value->dump()));
  int64_t v = value->get<int64_t>();
  if (v < min) fail(key, fmt::format("{} expects an integer >= {}, got {}", type_, min, v));
  return v;
}

int64_t Args::required_integer(const std::string& key, int64_t min) {
  if (!object_.contains(key)) fail(key, fmt::format("{} needs '{}' (an integer >= {})", type_, key, min));
  return integer(key, 0, min);
}

std::pair<int64_t, int64_t> Args::pair(const std::string& key, std::pair<int64_t, int64_t> fallback, int64_t min,
                                       bool required) {
  if (required && !object_.contains(key)) fail(key, fmt::format("{} needs '{}' (an integer or [h, w])", type_, key));
  const nlohmann::json* value = take(key);
  if (!value) return fallback;
  auto bad = [&] { fail(key, fmt::format("{} expects an integer >= {} or a pair [h, w] of them, got {}", type_, min, value->dump())); };
  if (value->is_number_integer()) {
    int64_t v = value->get<int64_t>();
    if (v < min) bad();
    return {v, v};
  }
  if (!value->is_array() || value->size() != 2 || !(*value)[0].is_number_integer() || !(*value)[1].is_number_integer())
    bad();
  std::pair<int64_t, int64_t> v{(*value)[0].get<int64_t>(), (*value)[1].get<int64_t>()};
  if (v.first < min || v.second < min) bad();
  return v;
}

double Args::number(const std::string& key, double fallback, double min, double max) {
  const nlohmann::json* value = take(key);
  if (!value) return fallback;
  if (!value->is_number()) fail(key, fmt::format("{} expects a number in [{}, {}], got {}", type_, min, max, value->dump()));
  double v = value->get<double>();
  if (v < min || v > max) fail(key, fmt::format("{} expects a number in [{}, {}], got {}", type_, min, max, v));
  return v;
}

bool Args::boolean(const std::string& key, bool fallback) {
  const nlohmann::json* value = take(key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail(key, fmt::format("{} expects true or false, got {}", type_, value->dump()));
  return value->get<bool>();
}

void Args::finish() const {
  for (const auto& [key, value] : object_.items())
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
      std::vector<std::string> valid(known_.begin() + 3, known_.end());
      throw ModelError(fmt::format("{}/{}: unknown argument '{}' for {}; valid arguments: {}", where_, key, key, type_,
                                   valid.empty() ? std::string("none") : fmt::format("{}", fmt::join(valid, ", "))));
    }
}

std::string batch_shape_str(const Shape& shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape) parts.push_back(d < 0 ? "N" : std::to_string(d));
  return fmt::format("({})", fmt::join(parts, ", "));
}

}  // namespace kestrel
