// Checkpoint file IO: atomic writes, the safetensors format byte for byte, its validation, SHA-256.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "kestrel/engine.h"
#include "kestrel/error.h"
#include "kestrel/io.h"

namespace {

namespace fs = std::filesystem;
using kestrel::DType;
using kestrel::io::NamedTensor;

// A fresh folder per test, removed afterwards, so tests never see each other's files.
class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "kestrel-io-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(path_)) names.insert(entry.path().filename().string());
    return names;
  }

 private:
  fs::path path_;
};

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

NamedTensor named(std::string name, DType dtype, kestrel::Shape shape, std::string data) {
  return NamedTensor{std::move(name), dtype, std::move(shape), std::move(data)};
}

void expect_same(const NamedTensor& actual, const NamedTensor& expected) {
  EXPECT_EQ(actual.name, expected.name);
  EXPECT_EQ(actual.dtype, expected.dtype) << expected.name;
  EXPECT_EQ(actual.shape, expected.shape) << expected.name;
  EXPECT_EQ(actual.data, expected.data) << expected.name;
}

std::string length_field(uint64_t length) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  return out;
}

// A file as another writer might produce it: any header text, no padding required.
std::string raw_file(const std::string& header, const std::string& data) {
  return length_field(header.size()) + header + data;
}

// The message of the InvalidArgument that decoding throws, or "" when it decodes.
std::string decode_error(const std::string& bytes, const std::string& source = "model.safetensors") {
  try {
    kestrel::io::decode_safetensors(bytes, source);
  } catch (const kestrel::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// --- safetensors ---------------------------------------------------------------------------------

std::vector<NamedTensor> sample_tensors() {
  return {
      named("weight", DType::f32, {2, 3}, bytes_of<float>({1, 2, 3, 4, 5, 6})),
      named("bias", DType::f64, {3}, bytes_of<double>({-1.5, 0, 1e300})),
      named("half", DType::f16, {2}, bytes_of<uint16_t>({0x3c00, 0xc000})),
      named("brain", DType::bf16, {1, 1, 2}, bytes_of<uint16_t>({0x3f80, 0x4000})),
      named("index", DType::i64, {2}, bytes_of<int64_t>({-7, int64_t{1} << 40})),
      named("count", DType::i32, {}, bytes_of<int32_t>({42})),  // a scalar: rank 0, one element
      named("mask", DType::u8, {5}, std::string("\x00\x01\x02\xfe\xff", 5)),
      named("empty", DType::f32, {0, 4}, ""),
  };
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  std::vector<NamedTensor> tensors = sample_tensors();
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode"}};
  std::string bytes = kestrel::io::encode_safetensors(tensors, metadata);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);  // the test host is little-endian, like the format
  EXPECT_EQ(header_length % 8, 0u) << "the header is padded so the data starts 8-byte aligned";

  kestrel::io::SafetensorsFile file = kestrel::io::decode_safetensors(bytes, "memory");
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 1; i < file.tensors.size(); ++i) EXPECT_LT(file.tensors[i - 1].name, file.tensors[i].name);
  for (const NamedTensor& expected : tensors) {
    const NamedTensor* actual = file.find(expected.name);
    ASSERT_NE(actual, nullptr) << expected.name;
    expect_same(*actual, expected);
  }
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(Safetensors, SavesAndLoadsThroughAFile) {
  TempFolder folder;
  std::string path = folder.file("checkpoints/step-1/model.safetensors");  // parents are created
  kestrel::io::save_safetensors(path, sample_tensors(), {{"step", "1"}});
  kestrel::io::SafetensorsFile file = kestrel::io::load_safetensors(path);
  EXPECT_EQ(file.metadata.at("step"), "1");
  EXPECT_EQ(file.tensors.size(), sample_tensors().size());
  expect_same(*file.find("weight"), sample_tensors()[0]);
}

TEST(Safetensors, EncodesNoTensorsAndNoMetadataAsAnEmptyObject) {
  std::string bytes = kestrel::io::encode_safetensors({});
  EXPECT_EQ(bytes, length_field(8) + "{}      ");
  kestrel::io::SafetensorsFile file = kestrel::io::decode_safetensors(bytes, "memory");
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

TEST(Safetensors, WritesTheKnownBytesOfATinyFile) {
  std::string bytes =
      kestrel::io::encode_safetensors({named("a", DType::f32, {2}, bytes_of<float>({1.0f, 2.0f}))}, {{"format", "pt"}});
  // 85 bytes of JSON, padded with 3 spaces to 88 = 0x58.
  std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(header.size(), 85u);
  std::string expected = std::string("\x58\0\0\0\0\0\0\0", 8) + header + "   " +
                         std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  EXPECT_EQ(bytes, expected);
}

TEST(Safetensors, LaysOutDataInNameOrder) {
  std::string bytes = kestrel::io::encode_safetensors(
      {named("b", DType::u8, {1}, "B"), named("a", DType::u8, {2}, "AA"), named("c", DType::u8, {0}, "")});
  std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                       R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},)"
                       R"("c":{"dtype":"U8","shape":[0],"data_offsets":[3,3]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(bytes, raw_file(header, "AAB"));
}

TEST(Safetensors, ReadsFilesFromOtherWriters) {
  // Unpadded header, keys in any order, data not in name order, an unknown extra field.
  std::string header = R"({"z":{"data_offsets":[0,2],"shape":[1],"dtype":"BF16"},)"
                       R"("a":{"dtype":"I32","shape":[1],"data_offsets":[2,6],"extra":1}})";
  kestrel::io::SafetensorsFile file =
      kestrel::io::decode_safetensors(raw_file(header, std::string("\x80\x3f\x07\x00\x00\x00", 6)), "other");
  ASSERT_EQ(file.tensors.size(), 2u);
  expect_same(file.tensors[0], named("a", DType::i32, {1}, bytes_of<int32_t>({7})));
  expect_same(file.tensors[1], named("z", DType::bf16, {1}, bytes_of<uint16_t>({0x3f80})));
}

TEST(Safetensors, RefusesToEncodeInconsistentTensors) {
  using kestrel::io::encode_safetensors;
  EXPECT_THROW(encode_safetensors({named("w", DType::f32, {2}, "abc")}), kestrel::InvalidArgument);
  EXPECT_THROW(encode_safetensors({named("w", DType::f32, {-1}, "")}), kestrel::InvalidArgument);
  EXPECT_THROW(encode_safetensors({named("w", DType::u8, {1}, "a"), named("w", DType::u8, {1}, "b")}),
               kestrel::InvalidArgument);
  EXPECT_THROW(encode_safetensors({named("__metadata__", DType::u8, {1}, "a")}), kestrel::InvalidArgument);
}

struct Corruption {
  const char* label;
  std::string bytes;
  const char* expected_phrase;  // part of what the message says is wrong
};

std::vector<Corruption> corruptions() {
  const std::string good_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\x01');
  return {
      {"truncated header length", std::string("\x10\0\0", 3), "too short for the 8-byte header length"},
      {"empty file", "", "too short"},
      {"header longer than the file", length_field(1000) + "{}",
       "runs past the end of the 10-byte file, which is truncated"},
      {"header length near 2^64", length_field(~uint64_t{0}) + "{}",
       "runs past the end of the 10-byte file, which is truncated"},
      {"bad JSON", raw_file(R"({"w":{"dtype":"F32",)", ""), "header: invalid JSON at line 1"},
      {"header not an object", raw_file("[1,2]", ""), "not an object"},
      {"unknown dtype", raw_file(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x"),
       "unknown dtype 'F8_E4M3'"},
      {"missing dtype", raw_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"), "no \"dtype\""},
      {"negative extent", raw_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""),
       "non-negative integers"},
      {"fractional extent", raw_file(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "x"),
       "non-negative integers"},
      {"one offset", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"), "two integers"},
      {"offsets out of range", raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"),
       "outside the 4 data bytes"},
      {"offsets reversed", raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}})", "ab"),
       "end before they begin"},
      {"size mismatch", raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "spans 8 bytes but shape (3,) of F32 needs 12"},
      {"shape overflowing 64 bits",
       raw_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "more than 2^64"},
      {"overlap",
       raw_file(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                eight),
       "tensors 'a' and 'b' overlap"},
      {"gap",
       raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                eight),
       "gap of 2 unused data bytes before tensor 'b'"},
      {"trailing bytes", raw_file("{" + good_entry + "}", eight + "zz"), "2 data bytes after the last tensor"},
      {"duplicate name", raw_file("{" + good_entry + "," + good_entry + "}", eight),
       "header: /: the key 'w' appears twice in one object"},
      {"duplicate field", raw_file(R"({"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
       "header: /w: the key 'dtype' appears twice"},
      {"metadata value not a string", raw_file(R"({"__metadata__":{"step":12}})", ""),
       "metadata value of 'step' is a JSON number"},
      {"metadata not an object", raw_file(R"({"__metadata__":"pt"})", ""), "not an object"},
  };
}

TEST(Safetensors, EveryCorruptionThrowsInvalidArgumentNamingTheSource) {
  for (const Corruption& corruption : corruptions()) {
    std::string message = decode_error(corruption.bytes, "shards/model-7.safetensors");
    ASSERT_FALSE(message.empty()) << corruption.label << ": decoded without complaint";
    EXPECT_EQ(message.rfind("shards/model-7.safetensors: corrupt safetensors file: ", 0), 0u)
        << corruption.label << ": " << message;
    EXPECT_NE(message.find(corruption.expected_phrase), std::string::npos) << corruption.label << ": " << message;
    EXPECT_NE(message.find("; "), std::string::npos) << corruption.label << " says what to do: " << message;
  }
}

TEST(Safetensors, ATruncatedRealFileIsCaught) {
  std::string bytes = kestrel::io::encode_safetensors(sample_tensors());
  for (size_t cut : {size_t{0}, size_t{7}, size_t{8}, size_t{20}, bytes.size() - 1}) {
    std::string message = decode_error(bytes.substr(0, cut));
    EXPECT_NE(message.find("model.safetensors: corrupt safetensors file"), std::string::npos) << cut;
  }
}

TEST(Safetensors, LoadNamesThePathOfACorruptOrMissingFile) {
  TempFolder folder;
  std::string path = folder.file("broken.safetensors");
  kestrel::io::write_file_atomically(path, length_field(100) + "{}");
  try {
    kestrel::io::load_safetensors(path);
    FAIL() << "a corrupt file loaded";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": corrupt safetensors file"), std::string::npos) << e.what();
  }
  try {
    kestrel::io::load_safetensors(folder.file("absent.safetensors"));
    FAIL() << "a missing file loaded";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

// --- reading -------------------------------------------------------------------------------------

// Only regular files are read: a FIFO would block for ever, /dev/zero never end; a size limit stops a
// mistaken path to a huge file before it is read.
TEST(ReadFile, RefusesFifosDevicesAndFilesAboveTheLimit) {
  TempFolder folder;
  const std::string fifo = folder.file("model.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    try {
      kestrel::io::read_file(path, kestrel::io::kMaxTextFileBytes);
      FAIL() << path << " was read";
    } catch (const kestrel::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
    EXPECT_THROW(kestrel::io::check_regular_file(path, "CSV file"), kestrel::InvalidArgument);
  }
  const std::string big = folder.file("big.json");
  kestrel::io::write_file_atomically(big, std::string(1000, ' '));
  EXPECT_EQ(kestrel::io::read_file(big, 1000).size(), 1000u);
  try {
    kestrel::io::read_file(big, 999);
    FAIL() << "a file above the limit was read";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("above the 999"), std::string::npos) << e.what();
  }
}

// --- atomic writes -------------------------------------------------------------------------------

TEST(AtomicWrite, ReplacesAnExistingFileAndLeavesNoTemporaries) {
  TempFolder folder;
  std::string path = folder.file("state.bin");
  kestrel::io::write_file_atomically(path, "old contents");
  kestrel::io::write_file_atomically(path, std::string("new\0contents", 12));
  EXPECT_EQ(kestrel::io::read_file(path), std::string("new\0contents", 12));
  kestrel::io::write_file_atomically(path, "");
  EXPECT_EQ(kestrel::io::read_file(path), "");
  EXPECT_EQ(folder.entries(), (std::set<std::string>{"state.bin"}));
}

TEST(AtomicWrite, WritesLargeFilesWhole) {
  TempFolder folder;
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + (i >> 11));
  kestrel::io::write_file_atomically(folder.file("big.bin"), big);
  EXPECT_EQ(kestrel::io::read_file(folder.file("big.bin")), big);
}

TEST(AtomicWrite, CreatesMissingParentFolders) {
  TempFolder folder;
  std::string path = folder.file("a/b/c/file.txt");
  kestrel::io::write_file_atomically(path, "deep");
  EXPECT_EQ(kestrel::io::read_file(path), "deep");
}

TEST(AtomicWrite, APathUnderARegularFileThrowsAndLeavesTheFileIntact) {
  TempFolder folder;
  std::string blocker = folder.file("model.bin");
  kestrel::io::write_file_atomically(blocker, "weights");
  std::string path = blocker + "/nested/out.bin";
  try {
    kestrel::io::write_file_atomically(path, "never written");
    FAIL() << "wrote under a regular file";
  } catch (const kestrel::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(kestrel::io::read_file(blocker), "weights");
  EXPECT_EQ(folder.entries(), (std::set<std::string>{"model.bin"}));
}

TEST(AtomicWrite, AFailedRenameRemovesTheTemporary) {
  // A folder in the way: the temporary is written, then rename() fails; the folder and its contents stay.
  TempFolder folder;
  std::string path = folder.file("target");
  kestrel::io::write_file_atomically(path + "/inside.txt", "kept");
  EXPECT_THROW(kestrel::io::write_file_atomically(path, "data"), kestrel::Error);
  EXPECT_EQ(kestrel::io::read_file(path + "/inside.txt"), "kept");
  EXPECT_EQ(folder.entries(), (std::set<std::string>{"target"}));
}

TEST(AtomicWrite, AReadOnlyFolderThrowsAndLeavesTheOldFileIntact) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  TempFolder folder;
  std::string path = folder.file("sealed/state.bin");
  kestrel::io::write_file_atomically(path, "old");
  fs::permissions(folder.file("sealed"), fs::perms::owner_read | fs::perms::owner_exec);
  try {
    kestrel::io::write_file_atomically(path, "new");
    FAIL() << "wrote into a read-only folder";
  } catch (const kestrel::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
  }
  fs::permissions(folder.file("sealed"), fs::perms::owner_all);
  EXPECT_EQ(kestrel::io::read_file(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(folder.file("sealed")), fs::directory_iterator()), 1);
}

TEST(ReadFile, AMissingFileOrAFolderIsAnInvalidArgumentNamingThePath) {
  TempFolder folder;
  std::string missing = folder.file("nope.bin");
  try {
    kestrel::io::read_file(missing);
    FAIL();
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_THROW(kestrel::io::read_file(folder.file("")), kestrel::InvalidArgument);
}

// --- tensors -------------------------------------------------------------------------------------

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

TEST(NamedTensors, RoundTripThroughTheCpuDevice) {
  auto tensor = kestrel::Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, cpu());
  NamedTensor host = kestrel::io::to_named("layer.weight", tensor);
  expect_same(host, named("layer.weight", DType::f32, {2, 3}, bytes_of<float>({1, 2, 3, 4, 5, 6})));

  kestrel::Tensor back = kestrel::io::to_tensor(host, cpu());
  EXPECT_EQ(back.shape(), (kestrel::Shape{2, 3}));
  EXPECT_EQ(back.dtype(), DType::f32);
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(NamedTensors, ViewsAreSavedInLogicalOrderAndSurviveAFile) {
  TempFolder folder;
  auto tensor = kestrel::Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5}, {2, 3}, cpu());
  auto empty = kestrel::Tensor::from_vector<float>({}, {0, 3}, cpu());
  kestrel::io::save_safetensors(folder.file("m.safetensors"), {kestrel::io::to_named("t", tensor.transpose(0, 1)),
                                                               kestrel::io::to_named("e", empty)});
  kestrel::io::SafetensorsFile file = kestrel::io::load_safetensors(folder.file("m.safetensors"));
  kestrel::Tensor loaded = kestrel::io::to_tensor(*file.find("t"), cpu());
  EXPECT_EQ(loaded.shape(), (kestrel::Shape{3, 2}));
  EXPECT_EQ(loaded.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  kestrel::Tensor loaded_empty = kestrel::io::to_tensor(*file.find("e"), cpu());
  EXPECT_EQ(loaded_empty.shape(), (kestrel::Shape{0, 3}));
  EXPECT_EQ(loaded_empty.numel(), 0);
}

TEST(NamedTensors, MismatchedDataIsRefused) {
  EXPECT_THROW(kestrel::io::to_tensor(named("w", DType::f32, {2}, "abc"), cpu()), kestrel::InvalidArgument);
  EXPECT_THROW(kestrel::io::to_tensor(named("w", DType::f32, {-2}, ""), cpu()), kestrel::InvalidArgument);
  EXPECT_THROW(kestrel::io::to_named("w", kestrel::Tensor()), kestrel::InvalidArgument);
}

// --- SHA-256 -------------------------------------------------------------------------------------

TEST(Sha256, MatchesTheFips180Vectors) {
  using kestrel::io::sha256_hex;
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, HandlesEveryPaddingBoundary) {
  // Lengths around the 56-byte point where the length field spills into a second block (Python hashlib).
  using kestrel::io::sha256_hex;
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(63, 'a')), "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(sha256_hex(std::string(65, 'a')), "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0");
}

}  // namespace
