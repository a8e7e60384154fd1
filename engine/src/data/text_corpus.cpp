// Text corpora: UTF-8 files (or a folder of them) into language-model samples over a vocabulary.
#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "kestrel/io.h"
#include "kestrel/text.h"

namespace kestrel::data {

namespace fs = std::filesystem;

namespace {

// A corpus file may be large, but not a mistaken path to a disk image.
constexpr uint64_t kMaxCorpusFileBytes = uint64_t(1) << 30;

// The files to read: the path itself, or a folder's regular files by name. Links are skipped (Debian's
// fortunes folder has a *.u8 link beside each file, which would count it twice), and so are folders
// inside it and names matching an exclude pattern.
std::vector<std::string> corpus_files(const TextOptions& options) {
  std::error_code error;
  const fs::file_status status = fs::status(options.path, error);
  if (error && error != std::errc::no_such_file_or_directory)
    throw InvalidArgument(fmt::format("text corpus '{}' cannot be read: {}; give a UTF-8 file or a folder of them",
                                      options.path, error.message()));
  if (error || !fs::exists(status))
    throw InvalidArgument(fmt::format("text corpus '{}' does not exist; give a UTF-8 file or a folder of them (Debian's "
                                      "fortunes corpus: apt-get install fortunes)",
                                      options.path));
  if (!fs::is_directory(status)) return {options.path};
  std::vector<std::string> files;
  fs::directory_iterator folder(options.path, error);
  if (error)
    throw InvalidArgument(fmt::format("text corpus folder '{}' cannot be listed: {}", options.path, error.message()));
  for (const fs::directory_entry& entry : folder) {
    if (entry.is_symlink(error) || !entry.is_regular_file(error)) continue;
    const std::string name = entry.path().filename().string();
    const bool excluded = std::any_of(options.exclude.begin(), options.exclude.end(),
                                      [&](const std::string& pattern) { return fnmatch(pattern.c_str(), name.c_str(), 0) == 0; });
    if (!excluded) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());  // the same order on every machine
  if (files.empty())
    throw InvalidArgument(fmt::format("text corpus folder '{}' has no files to read{}", options.path,
                                      options.exclude.empty() ? "" : " once the exclude patterns are applied"));
  return files;
}

// Consecutive windows of `stream`: sample i reads positions [i*T, i*T + T) and is labelled with the
// positions one later, so every position's target is the token that follows it.
Dataset windows(const std::vector<int64_t>& stream, int64_t context, int64_t vocabulary, std::string name) {
  Dataset d;
  d.name = std::move(name);
  d.sample_shape = {context};
  d.sample_dtype = DType::i64;
  d.token_count = vocabulary;
  d.label_shape = {context};
  d.num_classes = vocabulary;
  d.size = stream.size() > 1 ? static_cast<int64_t>(stream.size() - 1) / context : 0;
  if (d.size == 0) return d;  // (no iterator arithmetic on an empty stream: found by fuzzing)
  d.tokens.assign(stream.begin(), stream.begin() + d.size * context);
  d.labels.assign(stream.begin() + 1, stream.begin() + 1 + d.size * context);
  return d;
}

}  // namespace

std::vector<char32_t> read_text_file(const std::string& path, bool bytes) {
  const std::string content = io::read_file(path, kMaxCorpusFileBytes);
  if (!bytes) return decode_utf8(content, path);
  std::vector<char32_t> values(content.size());
  std::transform(content.begin(), content.end(), values.begin(), [](char b) { return static_cast<unsigned char>(b); });
  return values;
}

std::vector<int64_t> corpus_ids(const Vocabulary& vocabulary, const std::vector<char32_t>& text, const std::string& file) {
  if (!vocabulary.is_bytes()) return vocabulary.encode(text, file);
  return std::vector<int64_t>(text.begin(), text.end());
}

TextCorpus load_text(const TextOptions& options) {
  if (options.context < 1) throw InvalidArgument(fmt::format("text: context {} must be at least 1", options.context));
  if (!(options.validation_fraction > 0 && options.validation_fraction < 1))
    throw InvalidArgument(fmt::format("text: validation_fraction {} must be in (0, 1)", options.validation_fraction));
  TextCorpus corpus;
  corpus.files = corpus_files(options);
  std::vector<std::vector<char32_t>> texts;
  for (const std::string& file : corpus.files) texts.push_back(read_text_file(file, options.bytes));
  corpus.vocabulary = options.bytes ? Vocabulary::bytes() : Vocabulary::characters(texts);
  // Each file's head trains and its tail validates, so both splits see every file's kind of text.
  std::vector<int64_t> train, validation;
  for (size_t f = 0; f < texts.size(); ++f) {
    const std::vector<int64_t> ids = corpus_ids(corpus.vocabulary, texts[f], corpus.files[f]);
    const auto held_out = static_cast<size_t>(std::llround(double(ids.size()) * options.validation_fraction));
    train.insert(train.end(), ids.begin(), ids.end() - held_out);
    validation.insert(validation.end(), ids.end() - held_out, ids.end());
  }
  const std::string name = fs::path(options.path).filename().string();
  corpus.train = windows(train, options.context, corpus.vocabulary.size(), name + " (train)");
  corpus.validation = windows(validation, options.context, corpus.vocabulary.size(), name + " (validation)");
  for (const auto& [split, tokens, word] : {std::tuple{&corpus.train, train.size(), "train"},
                                            std::tuple{&corpus.validation, validation.size(), "validation"}})
    if (split->size == 0)
      throw InvalidArgument(fmt::format("text corpus '{}': its {} split has {} tokens, fewer than one sample of context "
                                        "{} plus one; give more text, a shorter context or another validation_fraction",
                                        options.path, word, tokens, options.context));
  return corpus;
}

}  // namespace kestrel::data
