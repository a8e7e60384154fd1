// Sampling text from a language model, one token per decoding step.
#include "kestrel/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "kestrel/philox.h"

namespace kestrel {

namespace {

// A uniform draw in [0, 1) with 53 random bits: Philox block `index` of `seed`, so a generation is
// the same on every machine.
double uniform(uint64_t seed, uint64_t index) {
  const kestrel_philox_block block = kestrel_philox4x32_10(seed, index);
  const uint64_t bits = (uint64_t(block.v[0]) << 21) ^ (uint64_t(block.v[1]) >> 11);  // 53 bits
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// The next token from one position's scores (V): greedy at temperature 0, else a draw from the
// softmax of scores / temperature over the top_k best (all when 0).
int64_t sample(const std::vector<double>& scores, int64_t vocabulary, const GenerateOptions& o, uint64_t index) {
  std::vector<int64_t> order(static_cast<size_t>(vocabulary));
  std::iota(order.begin(), order.end(), 0);
  // Best first; ties by id, so the order never depends on the sort's implementation.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  if (o.temperature == 0) return order[0];
  const size_t kept = o.top_k > 0 ? std::min<size_t>(order.size(), static_cast<size_t>(o.top_k)) : order.size();
  std::vector<double> weights(kept);
  for (size_t i = 0; i < kept; ++i) weights[i] = std::exp((scores[order[i]] - scores[order[0]]) / o.temperature);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  double target = uniform(o.seed, index) * total;
  for (size_t i = 0; i < kept; ++i) {
    target -= weights[i];
    if (target < 0) return order[i];
  }
  return order[kept - 1];
}

}  // namespace

GenerateResult generate(Model& model, const data::Vocabulary& vocabulary, const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_text) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw InvalidArgument(fmt::format("temperature {}: give a finite number >= 0 (0: always the best token)", o.temperature));
  if (o.tokens < 1) throw InvalidArgument(fmt::format("tokens {}: give at least 1", o.tokens));
  if (o.top_k < 0) throw InvalidArgument(fmt::format("top_k {}: give a count >= 0 (0: every token)", o.top_k));
  const std::vector<int64_t> prompt = vocabulary.encode(std::string_view(o.prompt), "prompt");
  if (prompt.empty()) throw InvalidArgument("prompt: give at least one character to continue");
  const int64_t scored = model.spec().layers()[model.spec().output()].output_shape.back();
  if (scored < vocabulary.size())
    throw InvalidArgument(fmt::format("{}: the model scores {} tokens but the vocabulary has {}",
                                      model.spec().source(), scored, vocabulary.size()));

  // A model with positional encodings sees at most max_positions() positions. Past them generation
  // slides: the context restarts from the last half of that window, decoded again in one call. history[begin,
  // end) is what the model sees, with the cache or without it, so both give the same text.
  const int64_t window = model.spec().max_positions();
  std::vector<int64_t> history = prompt;
  size_t begin = window > 0 && int64_t(history.size()) > window ? history.size() - size_t(window) : 0;
  Model::DecodeState state;
  const Device& device = model.device();
  auto decode_from = [&](size_t first) {  // history[first, end) into a fresh state
    state = Model::DecodeState();
    const std::vector<int64_t> ids(history.begin() + std::ptrdiff_t(first), history.end());
    return model.decode(Tensor::from_vector(ids, {1, int64_t(ids.size())}, device), state);
  };
  Tensor out = decode_from(begin);
  GenerateResult result;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.tokens; ++i) {
    // The scores of the last position: (1, t, V) -> (V), only the vocabulary's ids.
    std::vector<double> scores = out.select(1, out.size(1) - 1).select(0, 0).slice(0, 0, vocabulary.size()).to_doubles();
    const int64_t next = sample(scores, vocabulary.size(), o, static_cast<uint64_t>(i));
    const std::string text = vocabulary.decode({next});
    result.text += text;
    ++result.tokens;
    if (on_text) on_text(text);
    history.push_back(next);
    if (i + 1 == o.tokens) break;
    const bool slide = window > 0 && int64_t(history.size() - begin) > window;
    if (slide) begin = history.size() - size_t(window + 1) / 2;
    if (slide || !o.cache)  // everything in the window again
      out = decode_from(begin);
    else
      out = model.decode(Tensor::from_vector(std::vector<int64_t>{next}, {1, 1}, device), state);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace kestrel
