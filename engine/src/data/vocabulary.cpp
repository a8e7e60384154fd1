// Character and byte vocabularies: text to token ids and back, and the JSON a run folder keeps so that
// a checkpoint is only ever read with the ids it was trained on.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "../io/json_reader.h"
#include "../io/json_text.h"
#include "kestrel/io.h"
#include "kestrel/text.h"

namespace kestrel::data {

namespace {

constexpr const char* kFormat = "kestrel-vocabulary-1";

// "'é' (U+00E9)", or just the code for a control character.
std::string describe(char32_t c) {
  std::string out;
  if (c >= 0x20 && c != 0x7F) {
    out = "'";
    append_utf8(out, c);
    out += "' ";
  }
  return out + fmt::format("(U+{:04X})", static_cast<uint32_t>(c));
}

void raise(const std::string& message) { throw InvalidArgument(message); }

}  // namespace

Vocabulary Vocabulary::bytes() {
  Vocabulary v;
  v.bytes_ = true;
  return v;
}

Vocabulary Vocabulary::characters(const std::vector<std::vector<char32_t>>& texts, bool padding) {
  std::set<char32_t> seen;
  for (const auto& text : texts) seen.insert(text.begin(), text.end());
  Vocabulary v;
  v.padding_ = padding;
  v.symbols_.assign(seen.begin(), seen.end());
  const int64_t first = padding ? 1 : 0;
  for (size_t i = 0; i < v.symbols_.size(); ++i) v.ids_[v.symbols_[i]] = first + static_cast<int64_t>(i);
  return v;
}

std::vector<int64_t> Vocabulary::encode(std::string_view text, const std::string& what) const {
  if (bytes_) {
    std::vector<int64_t> ids(text.size());
    std::transform(text.begin(), text.end(), ids.begin(), [](char b) { return static_cast<unsigned char>(b); });
    return ids;
  }
  return encode(decode_utf8(text, what), what);
}

std::vector<int64_t> Vocabulary::encode(const std::vector<char32_t>& code_points, const std::string& what) const {
  if (bytes_) {
    std::string utf8;
    for (char32_t c : code_points) append_utf8(utf8, c);
    return encode(std::string_view(utf8), what);
  }
  std::vector<int64_t> ids;
  ids.reserve(code_points.size());
  for (size_t i = 0; i < code_points.size(); ++i) {
    auto found = ids_.find(code_points[i]);
    if (found == ids_.end())
      throw InvalidArgument(fmt::format("{}: character {} at position {} is not in the vocabulary of the {} characters "
                                        "the model was trained on; leave it out",
                                        what, describe(code_points[i]), i, symbols_.size()));
    ids.push_back(found->second);
  }
  return ids;
}

std::string Vocabulary::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= size()) {
      append_utf8(out, 0xFFFD);
    } else if (bytes_) {
      out += static_cast<char>(static_cast<unsigned char>(id));
    } else if (!padding_ || id > 0) {
      append_utf8(out, symbols_[static_cast<size_t>(id - (padding_ ? 1 : 0))]);
    }
  }
  return out;
}

std::string Vocabulary::to_json() const {
  std::string symbols;
  for (char32_t c : symbols_) append_utf8(symbols, c);
  nlohmann::json j = {
      {"format", kFormat}, {"kind", bytes_ ? "bytes" : "characters"}, {"padding", padding_}, {"symbols", symbols}};
  return j.dump(1) + "\n";
}

Vocabulary Vocabulary::from_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = io::parse_json(text, source);
  JsonReader reader(j, source, raise, "vocabulary");
  static constexpr const char* formats[] = {kFormat};
  reader.require("format", kFormat);
  reader.string("format", "", formats);
  static constexpr const char* kinds[] = {"characters", "bytes"};
  const bool bytes = reader.string("kind", "characters", kinds) == "bytes";
  const bool padding = reader.boolean("padding", false);
  const std::string symbols = reader.string("symbols", "");
  reader.finish();
  if (bytes) {
    if (!symbols.empty() || padding) raise(fmt::format("{}: a byte vocabulary lists no symbols and no padding", source));
    return Vocabulary::bytes();
  }
  const std::vector<char32_t> points = decode_utf8(symbols, source + ": /symbols");
  if (points.empty() || !std::is_sorted(points.begin(), points.end()) ||
      std::adjacent_find(points.begin(), points.end()) != points.end())
    raise(fmt::format("{}: /symbols must list distinct characters in code-point order, as Kestrel writes them", source));
  return Vocabulary::characters({points}, padding);
}

std::string Vocabulary::fingerprint() const { return io::sha256_hex(to_json()); }

}  // namespace kestrel::data
