// IDX files (the MNIST format) through zlib, which reads .gz and uncompressed files alike.
// Layout: u32 big-endian magic 0x000008NN (0x08 = unsigned bytes, NN = number of dims), NN big-endian
// u32 dims, then the bytes row-major.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>

#include "kestrel/data.h"
#include "kestrel/error.h"
#include "kestrel/io.h"

namespace kestrel::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8, 3 dims: count, rows, cols
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8, 1 dim: count
// Bytes per read: large enough to be fast, small enough that a corrupt header announcing terabytes
// fails on the missing data instead of on a huge allocation up front.
constexpr size_t kChunkBytes = size_t{1} << 24;

class IdxFile {
 public:
  explicit IdxFile(const std::string& path) : path_(path) {
    io::check_regular_file(path, "IDX file");
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw InvalidArgument(fmt::format("IDX file '{}' cannot be opened for reading", path));
  }
  ~IdxFile() { gzclose(file_); }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  // Reads the magic and dims; throws unless the magic is `expected`.
  std::vector<uint32_t> header(uint32_t expected, const char* kind) {
    const uint32_t magic = read_u32("magic number");
    if (magic != expected) {
      std::string hint;
      if (magic == kImagesMagic || magic == kLabelsMagic)
        hint = fmt::format(" (this is an IDX {} file: are the images and labels paths swapped?)",
                           magic == kImagesMagic ? "images" : "labels");
      else if ((magic >> 8) == 0x08)
        hint = fmt::format(" (an IDX file with {} dims)", magic & 0xff);
      throw InvalidArgument(fmt::format("IDX file '{}': magic number 0x{:08x} is not the {} magic 0x{:08x}{}",
                                        path_, magic, kind, expected, hint));
    }
    std::vector<uint32_t> dims(expected & 0xff);
    for (size_t i = 0; i < dims.size(); ++i) dims[i] = read_u32("dimension sizes");
    return dims;
  }

  // Reads exactly `count` bytes and hands them to `sink(bytes, n)` chunk by chunk.
  template <class Sink>
  void read_data(uint64_t count, const char* what, Sink sink) {
    std::vector<uint8_t> buffer(static_cast<size_t>(std::min<uint64_t>(count, kChunkBytes)));
    uint64_t done = 0;
    while (done < count) {
      const auto want = static_cast<size_t>(std::min<uint64_t>(count - done, kChunkBytes));
      const size_t got = read_some(buffer.data(), want);
      sink(buffer.data(), got);
      done += got;
      if (got < want) truncated(what, count, done);
    }
    verify_checksum();
  }

 private:
  uint32_t read_u32(const char* what) {
    std::array<uint8_t, 4> bytes{};
    const size_t got = read_some(bytes.data(), bytes.size());
    if (got < bytes.size()) truncated(what, bytes.size(), got);
    return uint32_t{bytes[0]} << 24 | uint32_t{bytes[1]} << 16 | uint32_t{bytes[2]} << 8 | bytes[3];
  }

  // The gzip CRC sits after the data, so zlib checks it only when asked to read past the end: a
  // damaged file that still inflates would otherwise load silently wrong pixels.
  void verify_checksum() {
    uint8_t extra = 0;
    gzread(file_, &extra, 1);  // bytes beyond the announced data are ignored
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code != Z_OK) {
      if (code == Z_BUF_ERROR)  // all data there, but the trailer with the checksum is cut off
        throw InvalidArgument(fmt::format("IDX file '{}' is truncated: its gzip checksum is missing; "
                                          "download or reinstall it", path_));
      throw InvalidArgument(fmt::format("IDX file '{}' is damaged ({}); download or reinstall it", path_,
                                        zlib_message(message)));
    }
  }

  // zlib prefixes its messages with the path, which our messages already name.
  std::string zlib_message(const char* message) const {
    std::string text = message ? message : "unknown zlib error";
    if (text.rfind(path_ + ": ", 0) == 0) text.erase(0, path_.size() + 2);
    return text;
  }

  // Fewer bytes than asked means the end of the data (or of the readable part of a damaged .gz).
  size_t read_some(uint8_t* destination, size_t bytes) {
    size_t done = 0;
    while (done < bytes) {
      const int n = gzread(file_, destination + done, static_cast<unsigned>(bytes - done));
      if (n <= 0) {
        int code = Z_OK;
        const char* message = gzerror(file_, &code);
        // Z_BUF_ERROR is zlib's "unexpected end of file": the caller reports it with the counts.
        if (code != Z_OK && code != Z_BUF_ERROR)
          throw InvalidArgument(fmt::format("IDX file '{}' is damaged ({}); download or reinstall it", path_,
                                            zlib_message(message)));
        break;
      }
      done += static_cast<size_t>(n);
    }
    return done;
  }

  [[noreturn]] void truncated(const char* what, uint64_t expected, uint64_t got) {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    throw InvalidArgument(fmt::format(
        "IDX file '{}' is truncated: its {} need {} bytes but only {} are there{}; download or reinstall it",
        path_, what, expected, got, code == Z_OK ? "" : fmt::format(" (zlib: {})", zlib_message(message))));
  }

  std::string path_;
  gzFile file_ = nullptr;
};

std::string base_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* suffix : {".gz", "-ubyte", ".idx3"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      name.resize(name.size() - s.size());
  }
  return name;
}

}  // namespace

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  Dataset dataset;
  dataset.name = base_name(images_path);

  IdxFile images(images_path);
  const std::vector<uint32_t> dims = images.header(kImagesMagic, "images");
  const uint64_t count = dims[0], rows = dims[1], cols = dims[2];
  if (rows == 0 || cols == 0)
    throw InvalidArgument(fmt::format("IDX file '{}': images of {} x {} pixels are empty", images_path, rows, cols));
  // Each dim is below 2^32, so count * rows * cols can overflow 64 bits only through absurd headers.
  if (rows * cols > (uint64_t{1} << 32) || count * rows * cols > (uint64_t{1} << 40))
    throw InvalidArgument(fmt::format("IDX file '{}': {} images of {} x {} pixels is implausibly large; "
                                      "the header is probably damaged", images_path, count, rows, cols));

  IdxFile labels(labels_path);
  const uint32_t label_count = labels.header(kLabelsMagic, "labels")[0];
  if (label_count != count)
    throw InvalidArgument(fmt::format("IDX files '{}' ({} images) and '{}' ({} labels) do not match: "
                                      "each image needs one label", images_path, count, labels_path, label_count));

  dataset.sample_shape = {1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
  dataset.size = static_cast<int64_t>(count);
  dataset.features.reserve(static_cast<size_t>(std::min<uint64_t>(count * rows * cols, kChunkBytes)));
  images.read_data(count * rows * cols, "pixels", [&](const uint8_t* bytes, size_t n) {
    for (size_t i = 0; i < n; ++i) dataset.features.push_back(static_cast<float>(bytes[i]) / 255.0f);
  });

  dataset.labels.reserve(std::min<uint64_t>(count, kChunkBytes));
  int64_t max_label = -1;
  labels.read_data(count, "labels", [&](const uint8_t* bytes, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      dataset.labels.push_back(bytes[i]);
      max_label = std::max<int64_t>(max_label, bytes[i]);
    }
  });
  // MNIST-family sets have ten classes even when a (sub)set happens to lack the last ones.
  dataset.num_classes = std::max<int64_t>(max_label + 1, 10);
  return dataset;
}

TrainTest load_fashion_mnist(const std::string& dir) {
  std::error_code ignored;
  if (!std::filesystem::is_directory(dir, ignored))
    throw InvalidArgument(fmt::format(
        "Fashion-MNIST folder '{}' not found: install the Debian package dataset-fashion-mnist "
        "(apt-get install dataset-fashion-mnist) or pass the folder holding "
        "{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte.gz",
        dir));
  const std::filesystem::path folder(dir);
  auto load = [&](const char* prefix, const char* name) {
    Dataset d = load_idx((folder / fmt::format("{}-images-idx3-ubyte.gz", prefix)).string(),
                         (folder / fmt::format("{}-labels-idx1-ubyte.gz", prefix)).string());
    d.name = name;
    d.class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    return d;
  };
  return TrainTest{load("train", "fashion-mnist-train"), load("t10k", "fashion-mnist-test")};
}

}  // namespace kestrel::data
