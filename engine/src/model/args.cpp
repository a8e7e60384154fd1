// Layer arguments read against their kind's ArgSpecs: every check and every message in one place.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "layer.h"

namespace kestrel {

namespace {

bool is_integer_in(const nlohmann::json& v, const ArgSpec& spec) {
  if (!v.is_number_integer()) return false;
  // Unsigned JSON numbers above int64 are out of range too, not wrapped.
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(spec.max) && double(v.get<uint64_t>()) >= spec.min;
  const int64_t x = v.get<int64_t>();
  return double(x) >= spec.min && double(x) <= spec.max;
}

}  // namespace

std::string describe(const ArgSpec& spec) {
  switch (spec.kind) {
    case ArgSpec::Kind::integer: return fmt::format("an integer from {} to {}", int64_t(spec.min), int64_t(spec.max));
    case ArgSpec::Kind::pair:
      return fmt::format("an integer from {} to {} or a pair [h, w] of them", int64_t(spec.min), int64_t(spec.max));
    case ArgSpec::Kind::number:
      return fmt::format("a number in [{}, {}{}", spec.min, spec.max, spec.max_exclusive ? ")" : "]");
    case ArgSpec::Kind::boolean: return "true or false";
  }
  return "";
}

Args::Args(const nlohmann::json& object, std::string where, const LayerKind& kind)
    : object_(object), where_(std::move(where)), kind_(kind) {
  for (const auto& [key, value] : object_.items()) {
    if (key == "type" || key == "name" || key == "inputs") continue;
    auto spec = std::find_if(kind_.args.begin(), kind_.args.end(), [&](const ArgSpec& a) { return a.name == key; });
    if (spec == kind_.args.end()) {
      std::vector<std::string> valid;
      for (const ArgSpec& a : kind_.args) valid.push_back(a.name);
      throw ModelError(fmt::format("{}/{}: unknown argument '{}' for {}; valid arguments: {}", where_, key, key,
                                   kind_.name, valid.empty() ? std::string("none") : fmt::format("{}", fmt::join(valid, ", "))));
    }
    check(*spec, value);
  }
  for (const ArgSpec& spec : kind_.args)
    if (spec.required && !object_.contains(spec.name))
      throw ModelError(fmt::format("{}/{}: {} needs '{}' ({})", where_, spec.name, kind_.name, spec.name, describe(spec)));
}

void Args::check(const ArgSpec& spec, const nlohmann::json& v) const {
  bool ok = false;
  switch (spec.kind) {
    case ArgSpec::Kind::integer: ok = is_integer_in(v, spec); break;
    case ArgSpec::Kind::pair:
      ok = is_integer_in(v, spec) || (v.is_array() && v.size() == 2 && is_integer_in(v[0], spec) && is_integer_in(v[1], spec));
      break;
    case ArgSpec::Kind::number: {
      const double x = v.is_number() ? v.get<double>() : NAN;
      ok = x >= spec.min && (spec.max_exclusive ? x < spec.max : x <= spec.max);
      break;
    }
    case ArgSpec::Kind::boolean: ok = v.is_boolean(); break;
  }
  if (!ok)
    throw ModelError(fmt::format("{}/{}: {} expects {}, got {}", where_, spec.name, kind_.name, describe(spec), v.dump()));
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

std::string batch_shape_str(const Shape& shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape) parts.push_back(d < 0 ? "N" : std::to_string(d));
  return fmt::format("({})", fmt::join(parts, ", "));
}

}  // namespace kestrel
