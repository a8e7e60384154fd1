// Data files (IDX images and labels, CSV, text corpora and saved vocabularies): any bytes on disk load
// as a dataset or are refused with the file named. The first byte picks the reader and its options; the
// rest is the file (for IDX and text categories, the second byte says where the first file ends and the
// second begins).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fuzz_target.hpp"
#include "kestrel/data.h"
#include "kestrel/text.h"

namespace {

// Every sample's ids within the vocabulary, and as many tokens and labels as the samples need.
void check_text(const kestrel::data::Dataset& d, int64_t vocabulary, bool per_position) {
  if (d.tokens.size() != size_t(d.size * d.sample_numel())) std::abort();
  if (d.labels.size() != size_t(per_position ? d.size * d.sample_numel() : d.size)) std::abort();
  for (int64_t id : d.tokens)
    if (id < 0 || id >= vocabulary) std::abort();
}

std::string write_temp(const std::string& name, const char* bytes, size_t size) {
  const auto path = std::filesystem::temp_directory_path() / ("kestrel_fuzz_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary).write(bytes, std::streamsize(size));
  return path.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t choice = data[0];
  const char* rest = reinterpret_cast<const char*>(data + 1);
  const size_t rest_size = size - 1;
  kestrel::fuzz::expect_clear_errors("data_files", [&] {
    const size_t split = std::min<size_t>(uint8_t(rest[0]) * rest_size / 256 + 1, rest_size);
    switch (choice % 4) {
      case 0: {
        const std::string images = write_temp("images.idx", rest + 1, split - 1);
        const std::string labels = write_temp("labels.idx", rest + split, rest_size - split);
        kestrel::data::Dataset d = kestrel::data::load_idx(images, labels);
        if (d.features.size() != size_t(d.size * d.sample_numel()) || d.labels.size() != size_t(d.size)) std::abort();
        break;
      }
      case 1: {
        kestrel::data::CsvOptions options;
        options.classification = (choice >> 2) % 2 == 0;
        options.target_columns = options.classification ? 1 : 1 + (choice >> 3) % 3;
        options.target_column = (choice >> 5) % 2 == 0 ? -1 : int(choice >> 6);
        const std::string csv = write_temp("data.csv", rest, rest_size);
        kestrel::data::Dataset d = kestrel::data::load_csv(csv, options);
        if (d.features.size() != size_t(d.size * d.sample_numel())) std::abort();
        break;
      }
      case 2: {  // a text corpus: a language model of one file, or two files' documents to classify
        const auto folder = std::filesystem::temp_directory_path() / ("kestrel_fuzz_text_" + std::to_string(getpid()));
        std::filesystem::create_directories(folder);
        kestrel::data::TextOptions options;
        options.path = folder.string();
        options.bytes = (choice >> 2) % 2 == 1;
        options.context = 1 + (choice >> 3) % 8;
        options.validation_fraction = 0.1 * (1 + (choice >> 6) % 4);
        std::ofstream(folder / "a", std::ios::binary).write(rest + 1, std::streamsize(split - 1));
        std::ofstream(folder / "b", std::ios::binary).write(rest + split, std::streamsize(rest_size - split));
        kestrel::data::TextCorpus corpus;
        if ((choice >> 5) % 2 == 0) {
          corpus = kestrel::data::load_text(options);
        } else {
          options.categories = {"a", "b"};
          corpus = kestrel::data::load_text_categories(options);
        }
        const bool per_position = options.categories.empty();
        check_text(corpus.train, corpus.vocabulary.size(), per_position);
        check_text(corpus.validation, corpus.vocabulary.size(), per_position);
        break;
      }
      default: {  // a saved vocabulary: what it reads back, it writes back the same
        const auto vocabulary = kestrel::data::Vocabulary::from_json(std::string(rest, rest_size), "vocabulary.json");
        if (kestrel::data::Vocabulary::from_json(vocabulary.to_json(), "again").fingerprint() != vocabulary.fingerprint())
          std::abort();
      }
    }
  });
  return 0;
}
