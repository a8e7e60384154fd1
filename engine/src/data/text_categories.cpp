// Text classification by source file: documents of a few files (fortune categories), each a padded
// sequence of character ids labelled with its file.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kestrel/text.h"

namespace kestrel::data {

namespace {

// The documents of a text: the runs of lines between lines that hold only `separator`, without their
// final newline; blank documents are dropped.
std::vector<std::vector<char32_t>> documents(const std::vector<char32_t>& text, const std::u32string& separator) {
  std::vector<std::vector<char32_t>> out;
  std::vector<char32_t> current;
  auto finish = [&] {
    while (!current.empty() && current.back() == U'\n') current.pop_back();
    const bool blank = std::all_of(current.begin(), current.end(), [](char32_t c) { return c == U' ' || c == U'\n' || c == U'\t'; });
    if (!blank) out.push_back(current);
    current.clear();
  };
  size_t line_start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != U'\n') continue;
    const std::u32string_view line(text.data() + line_start, i - line_start);
    if (line == separator) {
      finish();
    } else {
      current.insert(current.end(), line.begin(), line.end());
      if (i < text.size()) current.push_back(U'\n');
    }
    line_start = i + 1;
  }
  finish();
  return out;
}

}  // namespace

TextCorpus load_text_categories(const TextOptions& options) {
  namespace fs = std::filesystem;
  if (options.categories.size() < 2)
    throw InvalidArgument(fmt::format("text categories in '{}': name at least two files to tell apart", options.path));
  if (options.context < 1) throw InvalidArgument(fmt::format("text: context {} must be at least 1", options.context));
  if (!(options.validation_fraction > 0 && options.validation_fraction < 1))
    throw InvalidArgument(fmt::format("text: validation_fraction {} must be in (0, 1)", options.validation_fraction));
  std::u32string separator;
  for (char32_t c : decode_utf8(options.separator, "the separator")) separator += c;

  TextCorpus corpus;
  std::vector<std::vector<std::vector<char32_t>>> per_category;
  std::vector<std::vector<char32_t>> texts;
  for (const std::string& name : options.categories) {
    const std::string file = (fs::path(options.path) / name).string();
    corpus.files.push_back(file);
    texts.push_back(read_text_file(file, options.bytes));
    per_category.push_back(documents(texts.back(), separator));
    if (per_category.back().size() < 2)
      throw InvalidArgument(fmt::format("{}: {} document(s) between '{}' lines; a category needs at least two (one to "
                                        "train on, one to validate)",
                                        file, per_category.back().size(), options.separator));
  }
  corpus.vocabulary = options.bytes ? Vocabulary::bytes() : Vocabulary::characters(texts, /*padding=*/true);
  size_t kept = SIZE_MAX;
  for (const auto& docs : per_category) kept = std::min(kept, docs.size());

  auto make = [&](const char* split) {
    Dataset d;
    d.name = fs::path(options.path).filename().string() + " categories (" + split + ")";
    d.sample_shape = {options.context};
    d.sample_dtype = DType::i64;
    d.token_count = corpus.vocabulary.size();
    d.num_classes = static_cast<int64_t>(options.categories.size());
    d.class_names = options.categories;
    return d;
  };
  corpus.train = make("train");
  corpus.validation = make("validation");
  for (size_t label = 0; label < per_category.size(); ++label) {
    const auto& docs = per_category[label];
    // Balanced: the first `kept` documents of every category. Then each keeps its tail to validate.
    const size_t count = options.balance ? kept : docs.size();
    const auto held_out = std::max<size_t>(1, static_cast<size_t>(std::llround(double(count) * options.validation_fraction)));
    for (size_t i = 0; i < count; ++i) {
      Dataset& split = i + held_out < count ? corpus.train : corpus.validation;
      std::vector<char32_t> text(docs[i].begin(), docs[i].begin() + std::min<size_t>(docs[i].size(), options.context));
      const std::vector<int64_t> ids = corpus_ids(corpus.vocabulary, text, corpus.files[label]);
      split.tokens.insert(split.tokens.end(), static_cast<size_t>(options.context) - ids.size(), 0);  // left padding
      split.tokens.insert(split.tokens.end(), ids.begin(), ids.end());
      split.labels.push_back(static_cast<int64_t>(label));
      ++split.size;
    }
  }
  if (corpus.train.size == 0)
    throw InvalidArgument(fmt::format("text categories in '{}': nothing left to train on; lower validation_fraction",
                                      options.path));
  return corpus;
}

}  // namespace kestrel::data
