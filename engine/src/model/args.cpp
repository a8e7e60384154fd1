// Layer arguments read against their kind's ArgSpecs, through the checked-JSON reader that run configs
// use too, so a check and its message exist once.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "../io/json_reader.h"
#include "layer.h"

namespace kestrel {

namespace {

void raise_model_error(const std::string& message) { throw ModelError(message); }

int64_t bound(double value) { return static_cast<int64_t>(value); }

// Checks one argument with the reader's rule for its kind; the getters read the value later.
void check(JsonReader& reader, const ArgSpec& spec) {
  if (spec.required) reader.require(spec.name, describe(spec));
  switch (spec.kind) {
    case ArgSpec::Kind::integer: reader.integer<int64_t>(spec.name, 0, bound(spec.min), bound(spec.max)); break;
    case ArgSpec::Kind::pair: reader.pair(spec.name, {0, 0}, bound(spec.min), bound(spec.max)); break;
    case ArgSpec::Kind::number: reader.number(spec.name, 0, spec.min, spec.max, spec.max_exclusive); break;
    case ArgSpec::Kind::boolean: reader.boolean(spec.name, false); break;
    case ArgSpec::Kind::choice: reader.choice(spec.name, "", spec.choices); break;
  }
}

}  // namespace

std::string describe(const ArgSpec& spec) {
  switch (spec.kind) {
    case ArgSpec::Kind::integer: return JsonReader::integer_words(bound(spec.min), bound(spec.max));
    case ArgSpec::Kind::pair: return JsonReader::pair_words(bound(spec.min), bound(spec.max));
    case ArgSpec::Kind::number: return JsonReader::number_words(spec.min, spec.max, spec.max_exclusive);
    case ArgSpec::Kind::boolean: return JsonReader::boolean_words();
    case ArgSpec::Kind::choice: return JsonReader::choice_words(spec.choices);
  }
  return "";
}

Args::Args(const nlohmann::json& object, std::string where, const LayerKind& kind) : object_(object), kind_(kind) {
  JsonReader reader(object_, std::move(where), raise_model_error, kind_.name);
  reader.allow({"type", "name", "inputs", "checkpoint"});
  for (const ArgSpec& spec : kind_.args) check(reader, spec);
  reader.finish();
}

const nlohmann::json& Args::value(const std::string& key, ArgSpec::Kind kind) const {
  auto spec = std::find_if(kind_.args.begin(), kind_.args.end(), [&](const ArgSpec& a) { return a.name == key; });
  if (spec == kind_.args.end() || spec->kind != kind)
    throw std::logic_error(fmt::format("layer kind {} reads '{}', which its registry entry does not declare so", kind_.name, key));
  auto given = object_.find(key);
  return given != object_.end() ? *given : spec->fallback;
}

int64_t Args::integer(const std::string& key) const { return value(key, ArgSpec::Kind::integer).get<int64_t>(); }

std::pair<int64_t, int64_t> Args::pair(const std::string& key) const {
  const nlohmann::json& v = value(key, ArgSpec::Kind::pair);
  if (v.is_array()) return {v[0].get<int64_t>(), v[1].get<int64_t>()};
  return {v.get<int64_t>(), v.get<int64_t>()};
}

double Args::number(const std::string& key) const { return value(key, ArgSpec::Kind::number).get<double>(); }

bool Args::boolean(const std::string& key) const { return value(key, ArgSpec::Kind::boolean).get<bool>(); }

std::string Args::choice(const std::string& key) const { return value(key, ArgSpec::Kind::choice).get<std::string>(); }

ArgSpec integer(std::string name, double min, nlohmann::json fallback, double max) {
  return {std::move(name), ArgSpec::Kind::integer, fallback.is_null(), min, max, false, std::move(fallback), {}};
}
ArgSpec optional_integer(std::string name, double min, double max) {
  return {std::move(name), ArgSpec::Kind::integer, false, min, max, false, nullptr, {}};
}
ArgSpec pair(std::string name, double min, nlohmann::json fallback) {
  return {std::move(name), ArgSpec::Kind::pair, false, min, kIntMax, false, std::move(fallback), {}};
}
ArgSpec required_pair(std::string name, double min) {
  return {std::move(name), ArgSpec::Kind::pair, true, min, kIntMax, false, nullptr, {}};
}
ArgSpec number(std::string name, double min, double max, double fallback, bool max_exclusive) {
  return {std::move(name), ArgSpec::Kind::number, false, min, max, max_exclusive, fallback, {}};
}
ArgSpec boolean(std::string name, bool fallback) {
  return {std::move(name), ArgSpec::Kind::boolean, false, 0, 1, false, fallback, {}};
}
ArgSpec choice(std::string name, std::vector<std::string> names) {
  nlohmann::json fallback = names.front();
  return {std::move(name), ArgSpec::Kind::choice, false, 0, 0, false, std::move(fallback), std::move(names)};
}

std::string batch_shape_str(const Shape& shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape) parts.push_back(d < 0 ? "N" : std::to_string(d));
  return fmt::format("({})", fmt::join(parts, ", "));
}

}  // namespace kestrel
