// Character-level language models end to end on the CPU backend, on a file of Debian's fortunes corpus:
// a recurrent model learns more than character frequencies, the run folder keeps the vocabulary, and
// data that does not fit the model or the checkpoint is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "kestrel/generate.h"
#include "kestrel/io.h"
#include "kestrel/trainer.h"

namespace {

namespace fs = std::filesystem;
const std::string corpus = "/usr/share/games/fortunes/linux";

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kestrel_text_training_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A model file and a run config in `dir`, training a small GRU language model on `path`.
const std::string gru = R"({"type": "gru", "hidden_size": 64})";
// Two LSTM layers: one sequence node each where the device has the fused cell, composed steps elsewhere.
const std::string lstm = R"({"type": "lstm", "hidden_size": 32, "num_layers": 2})";
// A decoder-only Transformer block with learned positions and dropout (so masks are drawn too).
const std::string gpt_block = R"({"type": "positional_embedding", "max_len": 32, "embedding_dim": 24},
    {"type": "transformer_encoder_layer", "d_model": 24, "nhead": 2, "dim_feedforward": 48, "dropout": 0.1,
     "activation": "gelu", "norm_first": true, "causal": true})";

// The same block over the same tokens as a graph whose attention skips every space (id 2 of the corpus's
// vocabulary, after tab and newline) through a key-padding mask, so masked keys are frequent in every sequence.
const std::string masked_gpt_model = R"({"name": "tiny_masked_lm", "input": {"shape": [32], "dtype": "i64"}, "nodes": [
    {"name": "embed", "type": "embedding", "num_embeddings": 128, "embedding_dim": 24, "inputs": ["input"]},
    {"name": "spaces", "type": "key_padding_mask", "padding_idx": 2, "inputs": ["input"]},
    {"name": "positions", "type": "positional_embedding", "max_len": 32, "embedding_dim": 24, "inputs": ["embed"]},
    {"name": "block", "type": "transformer_encoder_layer", "d_model": 24, "nhead": 2, "dim_feedforward": 48,
     "dropout": 0.1, "activation": "gelu", "norm_first": true, "causal": true, "inputs": ["positions", "spaces"]},
    {"name": "head", "type": "linear", "out_features": 128, "inputs": ["block"]}]})";

// A run config in `dir` training `model` (a model file's text) as a character language model on `path`.
kestrel::RunConfig char_lm_of(const fs::path& dir, const std::string& path, const std::string& model) {
  kestrel::io::write_file_atomically((dir / "model.json").string(), model);
  kestrel::RunConfig config = kestrel::RunConfig::parse(R"({"model": "model.json",
    "data": {"dataset": "text", "path": ")" + path + R"(", "validation_fraction": 0.1},
    "optimizer": {"type": "adam", "lr": 0.01}, "batch_size": 32, "epochs": 2, "max_steps": 60,
    "eval": {"batch_size": 128}, "backend": {"preference": ["cpu"]}, "out": "run"})",
                                                       (dir / "run.train.json").string());
  return config;
}

// An embedding of `embeddings` characters, `body`, then `head`.
kestrel::RunConfig char_lm(const fs::path& dir, const std::string& path, int64_t embeddings = 128,
                           const std::string& head = R"({"type": "linear", "out_features": 128})",
                           const std::string& body = gru) {
  return char_lm_of(dir, path, R"({"name": "tiny_lm", "input": {"shape": [32], "dtype": "i64"}, "layers": [
      {"type": "embedding", "num_embeddings": )" + std::to_string(embeddings) +
                                   R"(, "embedding_dim": 24}, )" + body + ", " + head + "]}");
}

kestrel::TrainOptions quiet() {
  kestrel::TrainOptions options;
  options.quiet = true;
  return options;
}

// The loss of predicting every character from its frequency alone (nats per character).
double unigram_entropy(const std::vector<int64_t>& labels) {
  std::map<int64_t, double> counts;
  for (int64_t id : labels) counts[id] += 1;
  double entropy = 0;
  for (auto& [id, count] : counts) entropy -= count / labels.size() * std::log(count / labels.size());
  return entropy;
}

TEST(TextTraining, AGruLanguageModelLearnsMoreThanCharacterFrequencies) {
  fs::path dir = fresh_dir("learns");
  kestrel::Trainer trainer(char_lm(dir, corpus));  // see also the Transformer below
  const double baseline = unigram_entropy(trainer.test_data().labels);
  kestrel::TrainSummary summary = trainer.fit(quiet());
  EXPECT_EQ(summary.steps, 60);
  // 60 steps of 32 x 32 characters: well below the frequency baseline (about 3.2 nats), and the
  // accuracy is over every position.
  EXPECT_LT(summary.test.loss, baseline - 0.4) << "baseline " << baseline;
  EXPECT_GT(summary.test.accuracy, 0.25);
  // The vocabulary goes with the run.
  ASSERT_NE(trainer.vocabulary(), nullptr);
  auto saved = kestrel::data::Vocabulary::from_json(kestrel::io::read_file((dir / "run/vocabulary.json").string()),
                                                    "vocabulary.json");
  EXPECT_EQ(saved.fingerprint(), trainer.vocabulary()->fingerprint());
}

// A trained language model generates where its corpus is not: the vocabulary comes from the run folder's
// vocabulary.json (what kestrel generate does), and the text is the one the training process generates.
TEST(TextTraining, GenerationNeedsTheRunFolderNotTheCorpus) {
  fs::path dir = fresh_dir("generate_without_corpus");
  fs::copy_file(corpus, dir / "corpus.txt");
  kestrel::RunConfig config = char_lm(dir, (dir / "corpus.txt").string());
  config.max_steps = 5;
  config.out_dir = (dir / "run").string();
  kestrel::GenerateOptions options;
  options.prompt = "Linux ";
  options.tokens = 30;
  options.temperature = 0;
  std::string trained;
  {
    kestrel::Trainer trainer(config);
    trainer.fit(quiet());
    trained = kestrel::generate(trainer.model(), *trainer.vocabulary(), options).text;
  }
  fs::remove(dir / "corpus.txt");
  EXPECT_THROW(kestrel::Trainer{config}, kestrel::Error);  // the corpus is gone
  config.data.vocabulary_file = (dir / "run" / "vocabulary.json").string();
  kestrel::Trainer elsewhere(config);
  elsewhere.load_weights(config.out_dir);
  ASSERT_TRUE(elsewhere.vocabulary());
  EXPECT_EQ(kestrel::generate(elsewhere.model(), *elsewhere.vocabulary(), options).text, trained);
  EXPECT_THROW(elsewhere.fit(quiet()), kestrel::InvalidArgument);  // no samples: it says so
  EXPECT_THROW(elsewhere.evaluate(), kestrel::InvalidArgument);
}

// Decoding one token at a time, each layer carrying its state, gives what the whole sequence gives in
// one pass; sampling is deterministic for a seed, and temperature 0 always takes the best token.
TEST(TextTraining, GenerationDecodesStepByStepAsTheWholeSequenceDoes) {
  fs::path dir = fresh_dir("generate");
  kestrel::RunConfig config = char_lm(dir, corpus);
  config.max_steps = 20;
  kestrel::Trainer trainer(config);
  trainer.fit(quiet());
  kestrel::Model& model = trainer.model();
  const kestrel::data::Vocabulary& vocabulary = *trainer.vocabulary();

  std::vector<int64_t> ids = vocabulary.encode(std::string_view("Linux is only free if your time has no value. :-)"), "t");
  ids.resize(32);
  kestrel::Tensor tokens = kestrel::Tensor::from_vector(ids, {1, 32}, model.device());
  uint64_t unused = 0;
  std::vector<float> whole = model.forward(tokens, false, 0, unused).value().to_vector<float>();  // (1, 32, 128)
  kestrel::Model::DecodeState state;
  std::vector<float> stepwise = model.decode(tokens.slice(1, 0, 5), state).to_vector<float>();  // 5 at once, then 1 by 1
  for (int64_t t = 5; t < 32; ++t) {
    std::vector<float> next = model.decode(tokens.slice(1, t, t + 1), state).to_vector<float>();
    stepwise.insert(stepwise.end(), next.begin(), next.end());
  }
  EXPECT_EQ(state.positions, 32);
  ASSERT_EQ(stepwise.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(stepwise[i], whole[i], 1e-4) << "element " << i;

  kestrel::GenerateOptions options;
  options.prompt = "Linux ";
  options.tokens = 40;
  options.seed = 7;
  std::string streamed;
  kestrel::GenerateResult first = kestrel::generate(model, vocabulary, options, [&](const std::string& s) { streamed += s; });
  EXPECT_EQ(first.tokens, 40);
  EXPECT_EQ(streamed, first.text);
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, first.text) << "the same seed, the same text";
  options.cache = false;  // a recurrent model has no window: the same text, the prefix run again each time
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, first.text);
  options.cache = true;
  options.seed = 8;
  EXPECT_NE(kestrel::generate(model, vocabulary, options).text, first.text);
  // Greedy: the first token is the best-scored continuation of the prompt.
  options.temperature = 0;
  options.tokens = 1;
  std::vector<int64_t> prompt = vocabulary.encode(std::string_view("Linux "), "t");
  kestrel::Model::DecodeState fresh;
  std::vector<float> scores = model.decode(kestrel::Tensor::from_vector(prompt, {1, int64_t(prompt.size())}, model.device()), fresh)
                                  .select(1, int64_t(prompt.size()) - 1).to_vector<float>();
  scores.resize(vocabulary.size());
  const int64_t best = std::max_element(scores.begin(), scores.end()) - scores.begin();
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, vocabulary.decode({best}));

  options.prompt = "price: \xE2\x82\xAC";  // the euro sign is not in the file
  try {
    kestrel::generate(model, vocabulary, options);
    FAIL() << "a prompt outside the vocabulary was accepted";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("prompt: character"), std::string::npos) << e.what();
  }
}

// The recurrent and attention layers need nothing of a backend but its primitives, and take its fused
// ops where it has them: every loaded backend (Vulkan on lavapipe in CI, CUDA where there is a GPU)
// trains the same steps as the CPU.
TEST(TextTraining, EveryBackendTrainsTheSequenceModelsAsTheCpuDoes) {
  for (const std::string& body : {gru, lstm, gpt_block, std::string()}) {
  SCOPED_TRACE(body.empty() ? masked_gpt_model : body);
  fs::path dir = fresh_dir("backends");
  kestrel::RunConfig config = body.empty() ? char_lm_of(dir, corpus, masked_gpt_model)
                                           : char_lm(dir, corpus, 128, R"({"type": "linear", "out_features": 128})", body);
  config.max_steps = 3;
  config.data.train_subset = 96;
  config.data.test_subset = 32;
  kestrel::Trainer cpu(config);
  const kestrel::TrainSummary reference = cpu.fit(quiet());
  const std::vector<float> weights = cpu.model().flat_parameters().to_vector<float>();
  for (const std::string& backend : kestrel::Engine::global().available_backends()) {
    if (backend == "cpu") continue;
    SCOPED_TRACE(backend);
    config.backends = {backend};
    config.out_dir = (dir / backend).string();
    kestrel::Trainer other(config);
    const kestrel::TrainSummary got = other.fit(quiet());
    EXPECT_NEAR(got.test.loss, reference.test.loss, 1e-4 * reference.test.loss);
    const std::vector<float> trained = other.model().flat_parameters().to_vector<float>();
    ASSERT_EQ(trained.size(), weights.size());
    double worst = 0;
    for (size_t i = 0; i < weights.size(); ++i) worst = std::max(worst, double(std::abs(trained[i] - weights[i])));
    // Adam moves a parameter by about lr = 0.01 per step whatever its gradient's size, so rounding in
    // a near-zero gradient can show; a tenth of one step is far below what a wrong kernel gives.
    EXPECT_LT(worst, 1e-3) << "largest parameter difference after 3 Adam steps";
  }
  }
}

TEST(TextTraining, ACheckpointOfAnotherVocabularyIsRefused) {
  fs::path dir = fresh_dir("vocabulary");
  kestrel::RunConfig config = char_lm(dir, corpus);
  config.max_steps = 3;
  config.checkpoint_every = 3;
  kestrel::Trainer(config).fit(quiet());
  // The same run over a corpus with other characters.
  kestrel::io::write_file_atomically((dir / "other.txt").string(), std::string(2000, 'x') + std::string(2000, 'y'));
  kestrel::RunConfig other = char_lm(dir, (dir / "other.txt").string());
  other.max_steps = 6;
  kestrel::TrainOptions options = quiet();
  options.resume = true;
  try {
    kestrel::Trainer(other).fit(options);
    FAIL() << "a checkpoint of another vocabulary was resumed";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("another vocabulary"), std::string::npos) << e.what();
  }
  // Its weights file alone records the vocabulary too (found by review: it used to load silently).
  std::string weights;
  for (const auto& entry : fs::directory_iterator(dir / "run" / "checkpoints")) weights = entry.path().string();
  kestrel::Trainer reader(other);
  try {
    reader.load_weights(weights);
    FAIL() << "the weights file of another vocabulary was loaded";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("another vocabulary"), std::string::npos) << e.what();
  }
}

TEST(TextTraining, DataThatDoesNotFitTheModelIsNamed) {
  fs::path dir = fresh_dir("fit");
  try {
    kestrel::Trainer trainer(char_lm(dir, corpus, 40));  // the file has more than 40 characters
    FAIL() << "token ids past the embedding's rows were accepted";
  } catch (const kestrel::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set its embedding's num_embeddings to at least"), std::string::npos)
        << e.what();
  }
  try {
    kestrel::Trainer trainer(char_lm(dir, corpus, 128, R"({"type": "last_step"}, {"type": "linear", "out_features": 128})"));
    FAIL() << "a model scoring whole samples was given a label per position";
  } catch (const kestrel::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one per position of (32,)"), std::string::npos) << e.what();
  }
  // A bidirectional layer reads later positions: it trains, but cannot generate token by token.
  kestrel::RunConfig config = char_lm(dir, corpus);
  kestrel::io::write_file_atomically((dir / "model.json").string(), R"({"name": "both_ways",
    "input": {"shape": [32], "dtype": "i64"}, "layers": [{"type": "embedding", "num_embeddings": 128, "embedding_dim": 8},
      {"type": "lstm", "hidden_size": 8, "bidirectional": true}, {"type": "linear", "out_features": 128}]})");
  kestrel::Trainer trainer(config);
  kestrel::GenerateOptions options;
  options.prompt = "Linux";
  try {
    kestrel::generate(trainer.model(), *trainer.vocabulary(), options);
    FAIL() << "a bidirectional model generated";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("/layers/1 (lstm) is not causal"), std::string::npos) << e.what();
  }
}

}  // namespace
