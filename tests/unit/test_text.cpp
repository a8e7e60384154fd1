// Text data: strict UTF-8, character and byte vocabularies (and their saved form), and corpora read
// into language-model samples, with the errors a user gets for a bad corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kestrel/error.h"
#include "kestrel/text.h"

namespace {

namespace fs = std::filesystem;
using kestrel::InvalidArgument;
using kestrel::data::Vocabulary;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kestrel_text_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Text, Utf8DecodesAndRefusesMalformedSequences) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a, e-acute, euro sign, an emoji
  EXPECT_EQ(kestrel::data::decode_utf8(text, "t"), (std::vector<char32_t>{U'a', 0xE9, 0x20AC, 0x1F600}));
  std::string round_trip;
  for (char32_t c : kestrel::data::decode_utf8(text, "t")) kestrel::data::append_utf8(round_trip, c);
  EXPECT_EQ(round_trip, text);
  for (const std::string& bad : {std::string("ab\xE9z"), std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
                                 std::string("\xF4\x90\x80\x80"), std::string("ok\xE2\x82")}) {
    const std::string message = error_of([&] { kestrel::data::decode_utf8(bad, "corpus.txt"); });
    EXPECT_NE(message.find("corpus.txt: not UTF-8 at byte"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([] { kestrel::data::decode_utf8("ab\xE9z", "f"); }).find("at byte 2 (0xe9)"), std::string::npos);
}

TEST(Text, ACharacterVocabularyIsTheCorpusCharactersInCodePointOrder) {
  Vocabulary v = Vocabulary::characters({kestrel::data::decode_utf8("hello, w\xC3\xB6rld", "t")});
  EXPECT_EQ(v.size(), 10);  // ' ', ',', d, e, h, l, o, r, w, o-umlaut
  EXPECT_EQ(v.encode(std::string_view(" ,dehlorw"), "t"), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(v.decode(v.encode(std::string_view("w\xC3\xB6rld"), "t")), "w\xC3\xB6rld");
  const std::string message = error_of([&] { v.encode(std::string_view("hex"), "--prompt"); });
  EXPECT_NE(message.find("--prompt: character 'x' (U+0078) at position 2 is not in the vocabulary"), std::string::npos)
      << message;
  // Saved and read back: the same ids and the same fingerprint.
  Vocabulary back = Vocabulary::from_json(v.to_json(), "vocabulary.json");
  EXPECT_EQ(back.fingerprint(), v.fingerprint());
  EXPECT_EQ(back.encode(std::string_view("world"), "t"), v.encode(std::string_view("world"), "t"));
  EXPECT_NE(Vocabulary::characters({{U'a', U'b'}}).fingerprint(), Vocabulary::characters({{U'a', U'c'}}).fingerprint());
}

TEST(Text, AByteVocabularyTakesAnyBytes) {
  Vocabulary v = Vocabulary::bytes();
  EXPECT_EQ(v.size(), 256);
  const std::string bytes("\xFF\x00\x41", 3);
  EXPECT_EQ(v.encode(std::string_view(bytes), "t"), (std::vector<int64_t>{255, 0, 65}));
  EXPECT_EQ(v.decode({255, 0, 65}), bytes);
  EXPECT_TRUE(Vocabulary::from_json(v.to_json(), "v.json").is_bytes());
}

TEST(Text, ASavedVocabularyIsCheckedWhenRead) {
  for (const std::string& bad : {std::string(R"({"format": "kestrel-vocabulary-1", "kind": "characters", "symbols": "ba"})"),
                                 std::string(R"({"format": "kestrel-vocabulary-1", "kind": "characters", "symbols": "aa"})"),
                                 std::string(R"({"format": "kestrel-vocabulary-1", "kind": "characters", "symbols": ""})"),
                                 std::string(R"({"format": "kestrel-vocabulary-1", "kind": "bytes", "symbols": "a"})"),
                                 std::string(R"({"format": "other", "kind": "characters", "symbols": "a"})"),
                                 std::string(R"({"kind": "characters", "symbols": "a"})"),
                                 std::string(R"({"format": "kestrel-vocabulary-1", "kind": "words", "symbols": "a"})")}) {
    const std::string message = error_of([&] { Vocabulary::from_json(bad, "run/vocabulary.json"); });
    EXPECT_EQ(message.rfind("run/vocabulary.json", 0), 0u) << bad << " -> " << message;
  }
}

// A folder: its regular files by name, links and excluded names skipped; each file's head trains and
// its tail validates; each sample's labels are its tokens one position later.
TEST(Text, AFolderBecomesLanguageModelSamples) {
  fs::path dir = fresh_dir("folder");
  write(dir / "b.txt", "0123456789");
  write(dir / "a.txt", "abcdefghij");
  write(dir / "a.dat", "\xFF\xFE binary index");
  fs::create_symlink(dir / "a.txt", dir / "a.u8");
  kestrel::data::TextOptions options;
  options.path = dir.string();
  options.exclude = {"*.dat"};
  options.context = 3;
  options.validation_fraction = 0.4;
  kestrel::data::TextCorpus corpus = kestrel::data::load_text(options);
  ASSERT_EQ(corpus.files, (std::vector<std::string>{(dir / "a.txt").string(), (dir / "b.txt").string()}));
  EXPECT_EQ(corpus.vocabulary.size(), 20);
  // train: "abcdef" + "012345" (12 tokens: 3 samples of 3 plus the last label); validation: "ghij6789".
  const auto& train = corpus.train;
  ASSERT_EQ(train.size, 3);
  EXPECT_EQ(train.sample_shape, (kestrel::Shape{3}));
  EXPECT_EQ(train.label_shape, (kestrel::Shape{3}));
  EXPECT_EQ(train.num_classes, 20);
  EXPECT_EQ(train.token_count, 20);
  EXPECT_EQ(corpus.vocabulary.decode(train.tokens), "abcdef012");
  EXPECT_EQ(corpus.vocabulary.decode(train.labels), "bcdef0123");
  EXPECT_EQ(corpus.validation.size, 2);
  EXPECT_EQ(corpus.vocabulary.decode(corpus.validation.tokens), "ghij67");
  EXPECT_EQ(corpus.vocabulary.decode(corpus.validation.labels), "hij678");

  options.bytes = true;
  kestrel::data::TextCorpus bytes = kestrel::data::load_text(options);
  EXPECT_EQ(bytes.vocabulary.size(), 256);
  EXPECT_EQ(bytes.train.tokens[0], 'a');
}

TEST(Text, ABadCorpusIsNamedWithWhatToDo) {
  fs::path dir = fresh_dir("bad");
  kestrel::data::TextOptions options;
  options.context = 4;
  options.path = (dir / "missing").string();
  EXPECT_NE(error_of([&] { kestrel::data::load_text(options); }).find("does not exist"), std::string::npos);
  options.path = dir.string();
  EXPECT_NE(error_of([&] { kestrel::data::load_text(options); }).find("has no files to read"), std::string::npos);
  write(dir / "latin1.txt", "caf\xE9 au lait, caf\xE9 noir");
  const std::string message = error_of([&] { kestrel::data::load_text(options); });
  EXPECT_NE(message.find((dir / "latin1.txt").string() + ": not UTF-8 at byte 3"), std::string::npos) << message;
  options.bytes = true;  // the byte tokenizer takes it: 14 bytes train, 10 validate
  options.validation_fraction = 0.4;
  EXPECT_EQ(kestrel::data::load_text(options).train.size, 3);
  options.bytes = false;
  fs::remove(dir / "latin1.txt");
  write(dir / "empty.txt", "");
  EXPECT_NE(error_of([&] { kestrel::data::load_text(options); }).find("fewer than one sample of context 4"),
            std::string::npos);
  write(dir / "short.txt", "just enough text for train but not validation");
  options.validation_fraction = 0.05;
  EXPECT_NE(error_of([&] { kestrel::data::load_text(options); }).find("its validation split has 2 tokens"), std::string::npos);
}

// Fortune-style files: documents between "%" lines, each a left-padded sample labelled with its file.
TEST(Text, DocumentsAreClassifiedByTheirFile) {
  fs::path dir = fresh_dir("categories");
  write(dir / "cats", "meow\n%\npurr purr\n%\nhiss\n%\n  \n%\nnap\n");  // 4 documents (one blank dropped)
  write(dir / "dogs", "woof\n%\nfetch!\n");
  kestrel::data::TextOptions options;
  options.path = dir.string();
  options.categories = {"dogs", "cats"};
  options.context = 6;
  options.validation_fraction = 0.25;
  kestrel::data::TextCorpus corpus = kestrel::data::load_text_categories(options);
  const Vocabulary& v = corpus.vocabulary;
  EXPECT_TRUE(v.has_padding());
  EXPECT_EQ(v.encode(std::string_view("!"), "t"), (std::vector<int64_t>{3}));  // after padding, newline and space
  // dogs: "woof" trains, "fetch!" validates; cats: three train, "nap" validates.
  ASSERT_EQ(corpus.train.size, 4);
  EXPECT_EQ(corpus.train.labels, (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(corpus.train.class_names, (std::vector<std::string>{"dogs", "cats"}));
  EXPECT_EQ(corpus.train.label_shape, (kestrel::Shape{}));
  const std::vector<int64_t> first(corpus.train.tokens.begin(), corpus.train.tokens.begin() + 6);
  EXPECT_EQ(first[0], 0);  // padded on the left
  EXPECT_EQ(first[1], 0);
  EXPECT_EQ(v.decode(first), "woof");
  const std::vector<int64_t> second(corpus.train.tokens.begin() + 6, corpus.train.tokens.begin() + 12);
  EXPECT_EQ(v.decode(second), "meow");
  const std::vector<int64_t> third(corpus.train.tokens.begin() + 12, corpus.train.tokens.begin() + 18);
  EXPECT_EQ(v.decode(third), "purr p") << "a long document keeps its first `context` characters";
  ASSERT_EQ(corpus.validation.size, 2);
  EXPECT_EQ(corpus.validation.labels, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Vocabulary::from_json(v.to_json(), "v.json").fingerprint(), v.fingerprint());

  options.balance = true;  // two documents of each: one trains, one validates
  kestrel::data::TextCorpus balanced = kestrel::data::load_text_categories(options);
  EXPECT_EQ(balanced.train.labels, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(balanced.validation.labels, (std::vector<int64_t>{0, 1}));

  // Bytes are ids as they are (a Latin-1 byte is one id, not two UTF-8 ones): found by fuzzing.
  write(dir / "latin1", "caf\xE9\n%\nna\xEFve\n");
  options.categories = {"dogs", "latin1"};
  options.bytes = true;
  options.balance = false;
  kestrel::data::TextCorpus bytes = kestrel::data::load_text_categories(options);
  ASSERT_EQ(bytes.train.size, 2);
  const std::vector<int64_t> cafe(bytes.train.tokens.begin() + 6, bytes.train.tokens.begin() + 12);
  EXPECT_EQ(cafe, (std::vector<int64_t>{0, 0, 'c', 'a', 'f', 0xE9}));
  options.bytes = false;

  write(dir / "fish", "blub\n");
  options.categories = {"dogs", "fish"};
  EXPECT_NE(error_of([&] { kestrel::data::load_text_categories(options); }).find("fish: 1 document(s) between '%' lines"),
            std::string::npos);
  options.categories = {"dogs", "birds"};
  EXPECT_NE(error_of([&] { kestrel::data::load_text_categories(options); }).find("birds"), std::string::npos);
  options.categories = {"dogs"};
  EXPECT_NE(error_of([&] { kestrel::data::load_text_categories(options); }).find("at least two"), std::string::npos);
}

}  // namespace
