// Text generation from a trained language model: the prompt is read once, then each new token is
// sampled from the model's scores for the next position and fed back, one position per call
// (Model::decode carries each layer's state, so nothing before it is run again). A model with
// positional encodings sees at most its max_len positions: past them the window slides (the last half
// of it is decoded again and generation goes on from there), and a longer prompt keeps its end.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "kestrel/model.h"
#include "kestrel/text.h"

namespace kestrel {

struct GenerateOptions {
  std::string prompt;        // the text to continue (at least one token)
  int64_t tokens = 200;      // how many to generate (at least 1)
  double temperature = 1.0;  // scores are divided by it before the softmax; 0 picks the best (greedy)
  int64_t top_k = 0;         // sample among the k best only (0: all; more than the vocabulary: all)
  uint64_t seed = 0;         // the same seed, prompt and weights give the same text on every machine
  // false: run the whole context again for every token instead of carrying each layer's state (the same
  // context, sliding at the same tokens, so the same text: for measuring what the cache saves).
  bool cache = true;
};

struct GenerateResult {
  std::string text;  // the generated continuation (without the prompt)
  int64_t tokens = 0;
  double seconds = 0;  // generating them, the prompt excluded
  double tokens_per_second() const { return seconds > 0 ? double(tokens) / seconds : 0; }
};

// `on_text` receives each token's text as soon as it is sampled (streaming). Throws InvalidArgument for
// a prompt the vocabulary cannot encode, out-of-range options, or a model that cannot decode step by
// step (see Model::decode).
GenerateResult generate(Model& model, const data::Vocabulary& vocabulary, const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_text = {});

}  // namespace kestrel
