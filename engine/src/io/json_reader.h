// Checked reading of one JSON object from a model file or a run config. Engine-internal.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/tensor.h"  // Shape

namespace kestrel {

// Typed values with their ranges; keys never read are refused by finish() (usually typos). Every mistake
// becomes one error naming the file, the JSON path and what belongs there, thrown by the caller's
// `raise` (ModelError for model files, ConfigError for run configs). Reading an absent key gives the
// fallback, so defaults stay where they are declared. Layer arguments (Args) and run configs both read
// through here, so a check and its words exist once.
class JsonReader {
 public:
  using Raise = void (*)(const std::string& message);  // throws; must not return
  static constexpr int64_t no_max = std::numeric_limits<int64_t>::max();

  // where: "file: /json/path" of `object`. subject: what the object describes, for messages ("linear
  // expects ..."); without one, "expected ...".
  JsonReader(const nlohmann::json& object, std::string where, Raise raise, std::string subject = "");

  // What a check accepts, in words ("an integer from 1 to 2147483647", "a number in [0, 1)").
  static std::string integer_words(int64_t min, int64_t max);
  static std::string pair_words(int64_t min, int64_t max);
  static std::string number_words(double min, double max, bool max_exclusive);
  static std::string boolean_words() { return "true or false"; }
  static std::string choice_words(const std::vector<std::string>& names);  // "one of tanh, relu"

  template <class T>
  T integer(const std::string& key, T fallback, int64_t min, int64_t max = no_max) {
    // Never wider than T: a value that would not survive the narrowing is refused like any other.
    if constexpr (std::numeric_limits<T>::max() < std::numeric_limits<int64_t>::max())
      max = std::min<int64_t>(max, std::numeric_limits<T>::max());
    const nlohmann::json* v = get(key);
    if (!v) return fallback;
    if (!integer_in(*v, min, max)) fail(key, integer_words(min, max), *v);
    return static_cast<T>(v->get<int64_t>());
  }
  // An int or a [h, w] pair, as torch's kernel_size/stride/padding.
  std::pair<int64_t, int64_t> pair(const std::string& key, std::pair<int64_t, int64_t> fallback, int64_t min,
                                   int64_t max = no_max);
  double number(const std::string& key, double fallback, double min, double max, bool max_exclusive = false);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, std::string fallback);
  // One of `names`: the name itself, or (kind) its position, for an enum listed in the names' order.
  template <size_t N>
  std::string string(const std::string& key, std::string fallback, const char* const (&names)[N]) {
    const char* const* name = one_of(key, names, N);
    return name ? *name : fallback;
  }
  template <class Kind, size_t N>
  Kind kind(const std::string& key, Kind fallback, const char* const (&names)[N]) {
    const char* const* name = one_of(key, names, N);
    return name ? static_cast<Kind>(name - names) : fallback;
  }
  // One of `names` (a list built at run time, such as a layer argument's choices).
  std::string choice(const std::string& key, std::string fallback, const std::vector<std::string>& names);
  std::vector<double> numbers(const std::string& key, std::vector<double> fallback);  // a number or an array
  Shape shape(const std::string& key, Shape fallback);                                // positive integers
  // A non-empty array of strings; `what` names them in the message ("a non-empty array of backend names").
  std::vector<std::string> strings(const std::string& key, std::vector<std::string> fallback, const std::string& what);
  // Fails unless `key` is present; `what` says what it takes.
  void require(const std::string& key, const std::string& what);

  // The object under `key` (an empty one when absent), read with the same rules.
  JsonReader child(const std::string& key);
  // Marks keys as known without listing them among the valid ones (a layer's type, name and inputs).
  void allow(std::initializer_list<const char*> keys);
  // The value under `key`, marked as known; nullptr when absent.
  const nlohmann::json* get(const std::string& key);
  // Throws for any key not read, naming the valid ones.
  void finish() const;
  [[noreturn]] void fail(const std::string& key, const std::string& expected, const nlohmann::json& got) const;

 private:
  // Within [min, max], also for unsigned JSON numbers beyond int64 (refused, not wrapped).
  static bool integer_in(const nlohmann::json& v, int64_t min, int64_t max);
  const char* const* one_of(const std::string& key, const char* const* names, size_t count);
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  const nlohmann::json& object_;
  std::string where_, subject_;
  Raise raise_;
  std::vector<std::string> listed_, allowed_;  // keys read, in order; keys known but not listed
};

}  // namespace kestrel
