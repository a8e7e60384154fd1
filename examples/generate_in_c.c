/*
 * Text generation from C through the C API (kestrel/c_api.h): train a small character-level language
 * model on a corpus of the application's own, stream a continuation of a prompt as it is sampled, sample
 * it again from the saved run where the corpus is not read, and see bad prompts refused.
 *
 *   generate_in_c OUT_DIR
 *
 * Exits 0 when everything behaved as expected (ctest runs it), 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kestrel/c_api.h"

static int failures = 0;

static void expect(int condition, const char* what) {
  if (!condition) {
    fprintf(stderr, "generate_in_c: FAILED: %s (last error: %s)\n", what, kes_last_error());
    ++failures;
  }
}

/* The streamed bytes, gathered to compare with the whole continuation. */
struct stream {
  char text[4096];
  size_t length;
};

static void on_text(const char* text, size_t length, void* user_data) {
  struct stream* stream = (struct stream*)user_data;
  if (stream->length + length < sizeof stream->text) {
    memcpy(stream->text + stream->length, text, length);
    stream->length += length;
    stream->text[stream->length] = '\0';
  }
  fwrite(text, 1, length, stdout);
  fflush(stdout);
}

static int write_file(const char* dir, const char* name, const char* text, int times) {
  char path[1024];
  FILE* file;
  int i;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  file = fopen(path, "w");
  if (!file) return 0;
  for (i = 0; i < times; ++i) fputs(text, file);
  return fclose(file) == 0;
}

/* A trainer for the run in `dir`: trained there (steps > 0), or its weights loaded without its corpus. */
static kes_trainer* trainer_for(const char* dir, int64_t steps) {
  static const char* json =
      "{\"model\": \"model.json\", \"data\": {\"dataset\": \"text\", \"path\": \"corpus.txt\"},"
      " \"optimizer\": {\"type\": \"adam\", \"lr\": 0.01}, \"batch_size\": 16, \"seed\": 3, \"out\": \"run\","
      " \"backend\": {\"preference\": [\"cpu\"]}}";
  kes_config* config = NULL;
  kes_trainer* trainer = NULL;
  kes_summary summary;
  char path[1024];
  expect(kes_config_parse(json, dir, &config) == KES_OK, "kes_config_parse");
  if (steps > 0) {
    expect(kes_config_set_int(config, "max_steps", steps) == KES_OK, "set max_steps");
  } else {
    snprintf(path, sizeof path, "%s/run/vocabulary.json", dir);
    expect(kes_config_set_text(config, "vocabulary_file", path) == KES_OK, "set vocabulary_file");
  }
  expect(kes_trainer_create(config, &trainer) == KES_OK, "kes_trainer_create");
  kes_config_free(config);
  if (!trainer) return NULL;
  if (steps > 0) {
    expect(kes_trainer_fit(trainer, 0, NULL, NULL, &summary) == KES_OK && summary.steps == steps, "kes_trainer_fit");
  } else {
    snprintf(path, sizeof path, "%s/run", dir);
    expect(kes_trainer_load(trainer, path) == KES_OK, "kes_trainer_load");
  }
  return trainer;
}

int main(int argc, char** argv) {
  kes_trainer* trainer = NULL;
  kes_trainer* loaded = NULL;
  kes_generate_options options;
  struct stream stream;
  char* text = NULL;
  char* again = NULL;
  char not_yet_cleared = 0;
  char* refused = &not_yet_cleared; /* points somewhere, so the test sees a failed call set it to NULL */
  double speed = 0;
  size_t length = 0;
  if (argc != 2) {
    fprintf(stderr, "usage: generate_in_c OUT_DIR\n");
    return 2;
  }
  expect(write_file(argv[1], "corpus.txt", "the quick brown fox jumps over the lazy dog, said the café's owner. ", 150),
         "write the corpus");
  expect(write_file(argv[1], "model.json",
                    "{\"name\": \"tiny_lm\", \"input\": {\"shape\": [32], \"dtype\": \"i64\"}, \"layers\": ["
                    " {\"type\": \"embedding\", \"num_embeddings\": 64, \"embedding_dim\": 16},"
                    " {\"type\": \"gru\", \"hidden_size\": 32}, {\"type\": \"linear\", \"out_features\": 64}]}",
                    1),
         "write the model");
  trainer = trainer_for(argv[1], 10);
  if (!trainer) return 1;

  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.prompt = "the ";
  options.tokens = 60;
  options.temperature = 0.8;
  options.top_k = 10;
  options.seed = 11;
  memset(&stream, 0, sizeof stream);
  printf("%s", options.prompt);
  expect(kes_trainer_generate(trainer, &options, on_text, &stream, &text, &length, &speed) == KES_OK,
         "kes_trainer_generate");
  printf("\n(%.0f tokens/s)\n", speed);
  expect(text != NULL && length == stream.length && memcmp(text, stream.text, length) == 0,
         "the streamed pieces make up the continuation");
  expect(text != NULL && strlen(text) >= 60, "60 characters, some of two bytes (é)");
  expect(speed > 0, "a speed");

  /* The saved run, without reading its corpus: the same seed gives the same text. */
  loaded = trainer_for(argv[1], 0);
  expect(loaded && kes_trainer_generate(loaded, &options, NULL, NULL, &again, NULL, NULL) == KES_OK,
         "generate from the run");
  expect(text && again && strcmp(text, again) == 0, "the loaded run continues the prompt the same way");

  /* Bad input: a status and a message naming the problem. */
  options.prompt = "Zebra";
  expect(kes_trainer_generate(trainer, &options, NULL, NULL, &refused, NULL, NULL) == KES_INVALID_ARGUMENT &&
             refused == NULL && strstr(kes_last_error(), "prompt"),
         "a prompt with characters the vocabulary lacks is refused");
  printf("refused: %s\n", kes_last_error());
  options.prompt = "the ";
  options.tokens = 0;
  expect(kes_trainer_generate(trainer, &options, NULL, NULL, NULL, NULL, NULL) == KES_INVALID_ARGUMENT,
         "0 tokens is refused");
  printf("refused: %s\n", kes_last_error());
  expect(kes_trainer_generate(trainer, NULL, NULL, NULL, NULL, NULL, NULL) == KES_INVALID_ARGUMENT,
         "no options is refused");
  options.tokens = 5;
  options.size = 0;
  expect(kes_trainer_generate(trainer, &options, NULL, NULL, NULL, NULL, NULL) == KES_INVALID_ARGUMENT &&
             strstr(kes_last_error(), "sizeof(kes_generate_options)"),
         "options without their size are refused");
  printf("refused: %s\n", kes_last_error());

  kes_text_free(text);
  kes_text_free(again);
  kes_trainer_free(loaded);
  kes_trainer_free(trainer);
  if (failures) fprintf(stderr, "generate_in_c: %d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
