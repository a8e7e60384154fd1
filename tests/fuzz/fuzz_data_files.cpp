// Data files (IDX images and labels, CSV): any bytes on disk load as a dataset or are refused with the
// file named. The first byte picks the reader and its options; the rest is the file (for IDX, the
// second byte says where the images file ends and the labels file begins).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fuzz_target.hpp"
#include "kestrel/data.h"

namespace {

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
    if (choice % 2 == 0) {
      const size_t split = std::min<size_t>(uint8_t(rest[0]) * rest_size / 256 + 1, rest_size);
      const std::string images = write_temp("images.idx", rest + 1, split - 1);
      const std::string labels = write_temp("labels.idx", rest + split, rest_size - split);
      kestrel::data::Dataset d = kestrel::data::load_idx(images, labels);
      if (d.features.size() != size_t(d.size * d.sample_numel()) || d.labels.size() != size_t(d.size)) std::abort();
    } else {
      kestrel::data::CsvOptions options;
      options.classification = (choice >> 1) % 2 == 0;
      options.target_columns = options.classification ? 1 : 1 + (choice >> 2) % 3;
      options.target_column = (choice >> 4) % 2 == 0 ? -1 : int(choice >> 5);
      const std::string csv = write_temp("data.csv", rest, rest_size);
      kestrel::data::Dataset d = kestrel::data::load_csv(csv, options);
      if (d.features.size() != size_t(d.size * d.sample_numel())) std::abort();
    }
  });
  return 0;
}
