#include "json_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "kestrel/error.h"

namespace kestrel::io {

namespace {

// The byte that opens the first array or object nested deeper than the limit, found by a scan that
// skips strings, before any recursive parsing can start.
std::optional<size_t> too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

// The parser callback: keeps the JSON path of the value being read and the keys of each open object,
// and remembers the first key met twice.
class DuplicateKeys {
 public:
  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        open_.push_back({event == Event::array_start, 0, {}, {}});
        break;
      case Event::key:
        if (!open_.empty()) {
          Level& level = open_.back();
          level.key = parsed.get<std::string>();
          if (!level.keys.insert(level.key).second && !found_)
            found_ = fmt::format("{}: the key '{}' appears twice in one object", path(open_.size() - 1), level.key);
        }
        break;
      case Event::object_end:
      case Event::array_end:
        if (!open_.empty()) open_.pop_back();
        value_done();
        break;
      case Event::value:
        value_done();
        break;
    }
    return true;
  }
  const std::optional<std::string>& found() const { return found_; }

 private:
  struct Level {
    bool array;
    size_t index;
    std::string key;
    std::set<std::string> keys;
  };
  void value_done() {
    if (!open_.empty() && open_.back().array) ++open_.back().index;
  }
  // "/a/0/b" down to (not including) level `depth`; "/" for the top.
  std::string path(size_t depth) const {
    std::string out;
    for (size_t i = 0; i < depth; ++i) out += "/" + (open_[i].array ? std::to_string(open_[i].index) : open_[i].key);
    return out.empty() ? "/" : out;
  }

  std::vector<Level> open_;
  std::optional<std::string> found_;
};

}  // namespace

std::string text_position(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  if (auto at = too_deep_at(text))
    throw InvalidArgument(fmt::format("{}: invalid JSON at {}: nested deeper than {} levels", source,
                                      text_position(text, *at), kMaxJsonDepth));
  DuplicateKeys duplicates;
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(text.begin(), text.end(), std::ref(duplicates));
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 and points one past the offending character.
    throw InvalidArgument(fmt::format("{}: invalid JSON at {}: {}", source,
                                      text_position(text, e.byte > 0 ? e.byte - 1 : 0), e.what()));
  } catch (const nlohmann::json::exception& e) {
    // Not only syntax: a number beyond double's range ("1e4334") is an out_of_range error.
    throw InvalidArgument(fmt::format("{}: invalid JSON: {}", source, e.what()));
  }
  if (duplicates.found()) throw InvalidArgument(fmt::format("{}: {}", source, *duplicates.found()));
  return parsed;
}

int64_t count_or_zero(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  if (it->is_number_integer()) return std::max<int64_t>(it->get<int64_t>(), 0);
  const double v = it->get<double>();
  return v >= 0 && v < 9e18 ? int64_t(v) : 0;
}

}  // namespace kestrel::io
