// `kestrel generate`: text from a trained language model, streamed as it is sampled.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "kestrel/generate.h"
#include "kestrel/trainer.h"
#include "numeric_flags.h"
#include "run_flags.h"

namespace kestrel::cli {

void add_generate_command(CLI::App& app, Action& action) {
  static RunFlags run;
  static std::string prompt;
  static std::optional<int64_t> tokens, top_k;
  static std::optional<double> temperature;
  static bool no_cache = false;
  auto* g = app.add_subcommand("generate", "Continue a prompt with a trained language model, token by token");
  add_run_flags(g, run);
  g->add_option("--checkpoint", run.checkpoint, "checkpoint.json or a run folder (its vocabulary is checked)")->required();
  g->add_option("--prompt", prompt, "The text to continue")->required();
  add_integer_flag(g, "--tokens", tokens, "How many tokens to generate (default 200)", 1, 1 << 24);
  add_number_flag(g, "--temperature", temperature, "Divides the scores before sampling (default 1; 0: greedy)", 0, 100);
  add_integer_flag(g, "--top-k", top_k, "Sample among the k most likely tokens only (default 0: all)", 0);
  add_integer_flag(g, "--seed", run.seed, "Sampling seed (default 0): the same seed gives the same text", 0);
  g->add_flag("--no-cache", no_cache, "Run the whole text again for every token (to measure what the cache saves)");
  g->callback([&action] {
    action = [] {
      // The vocabulary the run wrote beside its checkpoints (vocabulary.json), where there is one, so that
      // the corpus need not be here; else the run config's data gives it. The checkpoint's weights must
      // have been trained on it either way (their vocabulary_sha256 is checked).
      RunFlags flags = run;
      flags.seed.reset();  // --seed seeds the sampling, not the model
      RunConfig config = resolve(flags);
      namespace fs = std::filesystem;
      std::error_code unreadable;
      const fs::path folder = fs::is_directory(run.checkpoint, unreadable) ? fs::path(run.checkpoint)
                                                                          : fs::path(run.checkpoint).parent_path();
      const fs::path written = folder / "vocabulary.json";
      if (config.data.dataset == "text" && fs::is_regular_file(written, unreadable))
        config.data.vocabulary_file = written.string();
      Trainer trainer(config);
      if (!trainer.vocabulary())
        throw InvalidArgument(fmt::format("{}: generate needs a language model trained on text data (\"dataset\": \"text\")",
                                          run.config));
      trainer.load_weights(run.checkpoint);
      GenerateOptions options;
      options.prompt = prompt;
      options.tokens = tokens.value_or(200);
      options.temperature = temperature.value_or(1.0);
      options.top_k = top_k.value_or(0);
      options.seed = static_cast<uint64_t>(run.seed.value_or(0));
      options.cache = !no_cache;
      // The prompt goes out with the first token, once generate() has checked everything.
      bool started = false;
      GenerateResult result = generate(trainer.model(), *trainer.vocabulary(), options, [&](const std::string& text) {
        if (!started) fmt::print("{}", prompt);
        started = true;
        fmt::print("{}", text);
        std::fflush(stdout);
      });
      fmt::print("\n");
      fmt::print(stderr, "kestrel: {} tokens in {:.2f} s, {:.1f} tokens/s on {}\n", result.tokens, result.seconds,
                 result.tokens_per_second(), trainer.device().str());
      return 0;
    };
  });
}

}  // namespace kestrel::cli
