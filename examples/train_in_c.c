/*
 * A host application in C using Kestrel's C API (kestrel/c_api.h): list the devices, build a run config
 * from JSON text, train with a progress callback that stops the run part-way, resume it to the end,
 * evaluate, predict on a buffer of the application's own, train on two devices of the process where it
 * has them, and see how bad input is reported.
 *
 *   train_in_c MODELS_DIR OUT_DIR
 *
 * Exits 0 when everything behaved as expected (ctest runs it), 1 otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kestrel/c_api.h"

static int failures = 0;

static void expect(int condition, const char* what) {
  if (!condition) {
    fprintf(stderr, "train_in_c: FAILED: %s (last error: %s)\n", what, kes_last_error());
    ++failures;
  }
}

/* Stops the run after `stop_at` steps; counts the calls. */
struct watch {
  int64_t stop_at;
  int calls;
};

static int on_progress(const kes_progress* progress, void* user_data) {
  struct watch* watch = (struct watch*)user_data;
  ++watch->calls;
  return progress->step >= watch->stop_at;
}

int main(int argc, char** argv) {
  kes_device_info devices[16];
  int32_t count = 0, i;
  kes_config* config = NULL;
  kes_trainer* trainer = NULL;
  kes_summary summary;
  kes_evaluation evaluation;
  struct watch watch = {5, 0};
  kes_tensor* images = NULL;
  kes_tensor* scores = NULL;
  static float pixels[4 * 28 * 28];
  float out[4 * 10];
  const int64_t shape[4] = {4, 1, 28, 28};
  int64_t out_shape[8];
  int32_t out_rank = 0;
  const char* json =
      "{\"model\": \"fashion_mlp.json\","
      " \"data\": {\"dataset\": \"synthetic\", \"train_samples\": 512, \"test_samples\": 128, \"classes\": 10},"
      " \"optimizer\": {\"type\": \"adam\", \"lr\": 0.001}, \"batch_size\": 64, \"epochs\": 2, \"seed\": 7}";

  if (argc != 3) {
    fprintf(stderr, "usage: train_in_c MODELS_DIR OUT_DIR\n");
    return 2;
  }
  printf("Kestrel %s\n", kes_version());
  expect(kes_devices(devices, 16, &count) == KES_OK && count >= 1, "kes_devices lists the CPU at least");
  for (i = 0; i < count && i < 16; ++i)
    printf("  %-8s %s (%s, %s)\n", devices[i].id, devices[i].name, devices[i].kind, devices[i].runtime);

  expect(kes_config_parse(json, argv[1], &config) == KES_OK, "kes_config_parse");
  expect(kes_config_set_text(config, "out", argv[2]) == KES_OK, "set out");
  expect(kes_config_set_text(config, "backend", "cpu") == KES_OK, "set backend");
  expect(kes_trainer_create(config, &trainer) == KES_OK, "kes_trainer_create");
  if (failures) return 1;
  printf("training on %s\n", kes_trainer_device(trainer));

  /* Stopped by the callback after 5 of 16 steps, with a checkpoint to resume from. */
  expect(kes_trainer_fit(trainer, 0, on_progress, &watch, &summary) == KES_OK, "kes_trainer_fit (stopped)");
  expect(summary.cancelled == 1 && summary.steps == 5 && watch.calls == 5, "the callback stops the run at step 5");
  expect(isnan(summary.test_loss), "a stopped run has not evaluated");
  watch.stop_at = 1000;
  expect(kes_trainer_fit(trainer, 1, on_progress, &watch, &summary) == KES_OK, "kes_trainer_fit (resumed)");
  expect(summary.cancelled == 0 && summary.steps == 16, "the resumed run ends after 16 steps");
  printf("trained %lld steps: train loss %.4f, test loss %.4f, accuracy %.1f%%, outputs in %s\n",
         (long long)summary.steps, summary.train_loss, summary.test_loss, summary.test_accuracy * 100,
         summary.out_dir);

  expect(kes_trainer_evaluate(trainer, &evaluation) == KES_OK && evaluation.samples == 128, "kes_trainer_evaluate");
  expect(fabs(evaluation.loss - summary.test_loss) < 1e-6, "evaluation repeats the run's test loss");

  /* Scores for four images of the application's own. */
  for (i = 0; i < 4 * 28 * 28; ++i) pixels[i] = (float)((i * 37) % 101) / 100.0f;
  expect(kes_tensor_create("cpu", KES_F32, shape, 4, pixels, &images) == KES_OK, "kes_tensor_create");
  expect(kes_trainer_predict(trainer, images, &scores) == KES_OK, "kes_trainer_predict");
  expect(kes_tensor_shape(scores, &out_rank, out_shape) == KES_OK && out_rank == 2 && out_shape[0] == 4 &&
             out_shape[1] == 10,
         "the scores are (4, 10)");
  expect(kes_tensor_read(scores, out, 40) == KES_OK, "kes_tensor_read");
  for (i = 0; i < 4; ++i) {
    int best = 0, c;
    for (c = 1; c < 10; ++c)
      if (out[i * 10 + c] > out[i * 10 + best]) best = c;
    printf("image %d: class %d (score %.3f)\n", i, best, out[i * 10 + best]);
  }

  /* The same run on two devices of this process, a rank each (the host shows two CPU devices under
   * KESTREL_CPU_DEVICES=2, as ctest runs this): stopped and resumed the same way, rank 0 speaking. */
  for (i = 0; i < count && i < 16; ++i)
    if (strcmp(devices[i].id, "cpu:1") == 0) {
      kes_trainer* ranks = NULL;
      char out_dir[1024];
      snprintf(out_dir, sizeof out_dir, "%s-two-devices", argv[2]);
      expect(kes_config_set_text(config, "out", out_dir) == KES_OK, "set out (two devices)");
      expect(kes_config_set_text(config, "devices", "cpu:0,cpu:1") == KES_OK, "set devices");
      expect(kes_trainer_create(config, &ranks) == KES_OK, "kes_trainer_create (two devices)");
      if (!ranks) break;
      watch.stop_at = 5;
      watch.calls = 0;
      expect(kes_trainer_fit(ranks, 0, on_progress, &watch, &summary) == KES_OK && summary.cancelled == 1 &&
                 summary.steps == 5 && watch.calls == 5,
             "two devices: the callback stops the run at step 5");
      watch.stop_at = 1000;
      expect(kes_trainer_fit(ranks, 1, on_progress, &watch, &summary) == KES_OK && summary.steps == 16,
             "two devices: the resumed run ends after 16 steps");
      expect(kes_trainer_evaluate(ranks, &evaluation) == KES_OK && evaluation.samples == 128 &&
                 fabs(evaluation.loss - summary.test_loss) < 1e-6,
             "two devices: evaluation repeats the run's test loss");
      printf("on two devices (%s first): test loss %.4f\n", kes_trainer_device(ranks), summary.test_loss);
      kes_trainer_free(ranks);
      break;
    }

  /* Bad input: a status and a message that names the problem, never a crash. */
  expect(kes_config_set_int(config, "epochs", 0) == KES_INVALID_ARGUMENT, "epochs 0 is refused");
  printf("refused: %s\n", kes_last_error());
  expect(kes_tensor_read(scores, out, 3) == KES_INVALID_ARGUMENT, "a too-small buffer is refused");
  expect(kes_trainer_predict(trainer, scores, &images) != KES_OK && strstr(kes_last_error(), "takes input"),
         "scores are not images: the model says what it takes");
  printf("refused: %s\n", kes_last_error());
  {
    kes_config* missing = NULL;
    expect(kes_config_load("/nonexistent/run.json", &missing) == KES_INVALID_ARGUMENT && missing == NULL &&
               strstr(kes_last_error(), "/nonexistent/run.json"),
           "a missing config file is named");
    printf("refused: %s\n", kes_last_error());
  }

  expect(kes_config_set_text(config, "precision", "f64") == KES_INVALID_ARGUMENT, "precision f64 is refused");
  printf("refused: %s\n", kes_last_error());
  expect(kes_config_set_text(config, "precision", "bf16") == KES_OK, "precision bf16");
  expect(kes_config_set_number(config, "weight_decay", -1) == KES_OK, "weight_decay is a setting");
  {
    kes_trainer* refused = NULL;
    expect(kes_trainer_create(config, &refused) == KES_INVALID_ARGUMENT && refused == NULL &&
               strstr(kes_last_error(), "/optimizer/weight_decay"),
           "a negative weight decay is refused, by its JSON path");
    printf("refused: %s\n", kes_last_error());
  }

  kes_tensor_free(scores);
  kes_tensor_free(images);
  kes_trainer_free(trainer);
  kes_config_free(config);
  if (failures) fprintf(stderr, "train_in_c: %d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
