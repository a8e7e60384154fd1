// Text for sequence models: a vocabulary that maps characters (or bytes) to token ids and back, and
// corpora read from UTF-8 files into language-model samples (each position's target is the next token).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kestrel/data.h"

namespace kestrel::data {

// The code points of UTF-8 text. Throws InvalidArgument naming `what` and the byte offset of the first
// malformed sequence (overlong forms, surrogates and values past U+10FFFF included).
std::vector<char32_t> decode_utf8(std::string_view text, const std::string& what);
void append_utf8(std::string& out, char32_t code_point);

// Token ids for text. Characters: one id per distinct Unicode character of the corpus, in code-point
// order (so the same corpus always gives the same ids). Bytes: ids 0..255 are the text's bytes, a
// fallback that takes any file and needs no corpus.
class Vocabulary {
 public:
  static Vocabulary bytes();
  // padding: id 0 stands for no character (what pads a short document), the characters follow it.
  static Vocabulary characters(const std::vector<std::vector<char32_t>>& texts, bool padding = false);

  bool is_bytes() const { return bytes_; }
  bool has_padding() const { return padding_; }
  int64_t size() const { return bytes_ ? 256 : static_cast<int64_t>(symbols_.size()) + (padding_ ? 1 : 0); }
  // Throws InvalidArgument naming `what` and the first character the vocabulary lacks.
  std::vector<int64_t> encode(std::string_view text, const std::string& what) const;
  std::vector<int64_t> encode(const std::vector<char32_t>& code_points, const std::string& what) const;
  std::string decode(const std::vector<int64_t>& ids) const;  // padding decodes to nothing, unknown ids to U+FFFD

  // {"format": "kestrel-vocabulary-1", "kind": "characters" | "bytes", "padding": true | false,
  //  "symbols": "<the characters in id order>"}
  std::string to_json() const;
  static Vocabulary from_json(const std::string& text, const std::string& source);  // throws naming source
  std::string fingerprint() const;  // SHA-256 of to_json(): a checkpoint records it

 private:
  bool bytes_ = false, padding_ = false;
  std::vector<char32_t> symbols_;  // characters: id -> code point
  std::unordered_map<char32_t, int64_t> ids_;
};

struct TextOptions {
  std::string path;                  // a UTF-8 text file, or a folder whose regular files (by name) are read
  std::vector<std::string> exclude;  // a folder's file names to skip, as shell patterns ("*.dat")
  bool bytes = false;                // the byte vocabulary instead of the corpus's characters
  int64_t context = 128;             // positions per sample
  double validation_fraction = 0.1;  // the tail of every file, held out
  // Classifying documents by the file they come from (load_text_categories):
  std::vector<std::string> categories;  // file names in the folder `path`, one class each, in this order
  std::string separator = "%";          // a line holding only this ends a document (the fortune format)
  bool balance = false;                 // every class keeps as many documents as the smallest one
};

struct TextCorpus {
  Vocabulary vocabulary;
  std::vector<std::string> files;  // read, in order
  // Language-model samples: (context) token ids, labels (context) the ids one position later; samples
  // are consecutive windows of the files' text, train from the head of each file, validation from its
  // tail. num_classes is the vocabulary's size.
  Dataset train, validation;
};

// Throws InvalidArgument naming the file (and byte offset) that is missing, not UTF-8 or too short.
TextCorpus load_text(const TextOptions& options);

// Which file a document comes from: each category's file is cut into documents at separator lines,
// each document is one sample of `context` character ids (its first `context` characters, padded on the
// left with id 0, so the last position holds its last character) labelled with its category's index.
// The last validation_fraction of each file's documents is held out. The vocabulary has padding.
TextCorpus load_text_categories(const TextOptions& options);

// A corpus file's characters (or, with bytes, its bytes as values 0..255); errors name the file.
std::vector<char32_t> read_text_file(const std::string& path, bool bytes);
// The ids of what read_text_file gave: a byte vocabulary takes the values as they are (they are bytes,
// not characters to encode as UTF-8); a character vocabulary encodes them, naming `file` in errors.
std::vector<int64_t> corpus_ids(const Vocabulary& vocabulary, const std::vector<char32_t>& text, const std::string& file);

}  // namespace kestrel::data
