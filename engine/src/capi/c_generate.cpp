// The C API's text generation (kestrel/c_api.h): kestrel::generate on a trainer's model.
#include <fmt/format.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "c_boundary.h"
#include "c_objects.h"
#include "kestrel/generate.h"

using namespace kestrel;
using namespace kestrel::capi;

extern "C" {

kes_status kes_trainer_generate(kes_trainer* trainer, const kes_generate_options* options, kes_text_fn on_text,
                                void* user_data, char** text, size_t* text_length, double* tokens_per_second) {
  if (text) *text = nullptr;
  return guarded([&] {
    need(trainer, "trainer");
    need(options, "options");
    // The fields this version reads end with seed; a caller built against a later header sets a larger size.
    const size_t known = offsetof(kes_generate_options, seed) + sizeof(options->seed);
    if (options->size < known)
      throw InvalidArgument(fmt::format("kes_trainer_generate: options->size is {}; set it to sizeof(kes_generate_options) "
                                        "({} in this version)", options->size, sizeof(kes_generate_options)));
    need(options->prompt, "options->prompt");
    Trainer& speaker = trainer->first();
    if (!speaker.vocabulary())
      throw InvalidArgument(fmt::format(
          "{}: kes_trainer_generate needs a language model trained on text data (\"dataset\": \"text\")",
          speaker.config().source));
    GenerateOptions sampling;
    sampling.prompt = options->prompt;
    sampling.tokens = options->tokens;
    sampling.temperature = options->temperature;
    sampling.top_k = options->top_k;
    sampling.seed = options->seed;
    std::function<void(const std::string&)> stream;
    if (on_text) stream = [&](const std::string& piece) { on_text(piece.data(), piece.size(), user_data); };
    const GenerateResult result = generate(speaker.model(), *speaker.vocabulary(), sampling, stream);
    if (tokens_per_second) *tokens_per_second = result.tokens_per_second();
    if (text_length) *text_length = result.text.size();
    if (!text) return;
    char* out = static_cast<char*>(std::malloc(result.text.size() + 1));
    if (!out) throw std::bad_alloc();
    std::memcpy(out, result.text.c_str(), result.text.size() + 1);
    *text = out;
  });
}

void kes_text_free(char* text) { std::free(text); }

}  // extern "C"
