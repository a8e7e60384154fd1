/*
 * Kestrel's C API: the engine for host applications in any language (C, and whatever binds C: Rust,
 * Go, Julia, C#, ...). Plain C99; the prefix `kes_` keeps it apart from the plugin ABI (`kestrel_*`).
 *
 * Errors: every call that can fail returns a kes_status; on failure kes_last_error() returns the
 * message (what went wrong and what to do), valid on the calling thread until its next kes_ call. No
 * exception and no abort crosses this boundary.
 *
 * Ownership: an object made by kes_*_create/_load/_parse (out parameter) belongs to the caller, who
 * frees it with the matching kes_*_free (NULL is accepted). Strings passed in are copied; strings and
 * structs handed out are the caller's buffers or stay valid as documented.
 */
#ifndef KESTREL_C_API_H
#define KESTREL_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kes_status {
  KES_OK = 0,
  KES_INVALID_ARGUMENT = 1, /* a bad argument, config, model file or data file: the message names it */
  KES_UNSUPPORTED = 2,      /* valid, but the backend or this build cannot do it */
  KES_OUT_OF_MEMORY = 3,
  KES_UNAVAILABLE = 4,      /* the backend or device is missing */
  KES_BACKEND_ERROR = 5,    /* a backend failed while running */
  KES_NONFINITE_LOSS = 6,   /* training stopped: the loss became NaN or infinite (the message names the step) */
  KES_PEER_FAILED = 7,      /* data parallelism: another rank failed or stalled */
  KES_INTERNAL = 8          /* a bug: please report it with the message */
} kes_status;

/* The message of the calling thread's last failure ("" when none). */
const char* kes_last_error(void);
/* "0.1.0" */
const char* kes_version(void);

/* ---- devices ---------------------------------------------------------------------------------- */

/* Text fields here and in kes_summary are NUL-terminated and cut to fit when longer (the C++ API and
 * `kestrel devices --json` have them whole). */
typedef struct kes_device_info {
  char id[32];            /* what to pass where a device is named: "cpu:0", "cuda:1" */
  char name[128];         /* "NVIDIA H100 80GB HBM3" */
  char kind[32];          /* "cpu", "discrete-gpu", "integrated-gpu", "software" */
  char runtime[64];       /* what runs the kernels */
  uint64_t memory_total;  /* bytes */
  uint64_t memory_free;   /* bytes, now */
  int32_t compute_units;
} kes_device_info;

typedef struct kes_memory_stats {
  uint64_t allocated;       /* bytes in live tensors */
  uint64_t reserved;        /* bytes held from the device, cached blocks included */
  uint64_t peak_allocated;  /* since the last reset */
} kes_memory_stats;

/* Every device of every loaded backend, best first: writes up to `capacity` into `devices` (may be
 * NULL when capacity is 0) and the number there is into `count`. */
kes_status kes_devices(kes_device_info* devices, int32_t capacity, int32_t* count);
/* device: "cpu", "cuda:1", ... or "auto" (the best). */
kes_status kes_device_memory(const char* device, kes_memory_stats* stats);

/* ---- tensors ---------------------------------------------------------------------------------- */

typedef struct kes_tensor kes_tensor;
typedef enum kes_dtype { KES_F32 = 0, KES_I64 = 4 } kes_dtype; /* the dtypes host data comes in */

/* A tensor on `device` of `shape` (rank <= 8), filled from `data` (row-major, `dtype`'s elements). */
kes_status kes_tensor_create(const char* device, kes_dtype dtype, const int64_t* shape, int32_t rank,
                             const void* data, kes_tensor** tensor);
/* Its rank and shape (writes `rank` entries; shape may be NULL to ask the rank). */
kes_status kes_tensor_shape(const kes_tensor* tensor, int32_t* rank, int64_t* shape);
/* Copies the tensor's elements, as f32, into `data` (room for `capacity` floats). */
kes_status kes_tensor_read(const kes_tensor* tensor, float* data, size_t capacity);
void kes_tensor_free(kes_tensor* tensor);

/* ---- run configs ------------------------------------------------------------------------------ */

typedef struct kes_config kes_config;

/* A run config (the *.train.json format: model, data, loss, optimizer, ...) from a file, or from JSON
 * text whose relative paths are taken from `base_dir`. */
kes_status kes_config_load(const char* path, kes_config** config);
kes_status kes_config_parse(const char* json, const char* base_dir, kes_config** config);
/* Overrides, like the command line's flags. Integer keys: "epochs", "batch_size", "max_steps", "seed",
 * "accumulate_steps", "train_subset", "test_subset". Text keys: "out", "backend" (a backend or device,
 * or a comma-separated preference list, as --backend), "devices" (a comma-separated list: the trainer
 * then runs a rank per device of this process, and speaks through rank 0), "vocabulary_file" (text data:
 * a run's vocabulary.json, and the corpus is not read: for generating with a trained model), "precision"
 * ("bf16" or "f16": mixed precision's products; "f32": off). Number keys: "lr",
 * "clip_grad_norm" (the gradients' global L2 norm clipped to it before each update; 0: none), "weight_decay"
 * (L2 for sgd and adam, decoupled for adamw; 0 to 1). Rules
 * between settings (the micro-batches dividing the batch, the deterministic mode's single micro-batch)
 * are checked when a trainer is created from the config. */
kes_status kes_config_set_int(kes_config* config, const char* key, int64_t value);
kes_status kes_config_set_text(kes_config* config, const char* key, const char* value);
kes_status kes_config_set_number(kes_config* config, const char* key, double value);
void kes_config_free(kes_config* config);

/* ---- training --------------------------------------------------------------------------------- */

typedef struct kes_trainer kes_trainer;

typedef struct kes_progress {
  int64_t step;         /* optimizer steps done */
  int64_t total_steps;
  int64_t epoch;        /* 0-based, the epoch in progress */
  double loss;          /* the training loss last reported (NaN before the first report) */
  double accuracy;      /* likewise; NaN for regression */
} kes_progress;

/* Called after every optimizer step on the training thread (with several devices, rank 0's thread, not
 * the caller's); return 0 to go on, anything else to stop: the trainer then writes a checkpoint (so
 * kes_trainer_fit with resume = 1 continues there) and returns KES_OK with summary->cancelled = 1. It may
 * not call kes_trainer_fit (KES_INVALID_ARGUMENT), nor kes_trainer_evaluate with several devices. */
typedef int (*kes_progress_fn)(const kes_progress* progress, void* user_data);

typedef struct kes_summary {
  int64_t steps;
  int64_t epochs;
  double train_loss;
  double test_loss;            /* NaN when the run was cancelled before evaluating */
  double test_accuracy;        /* NaN for regression */
  double samples_per_second;
  int32_t cancelled;           /* 1 when the progress callback stopped the run */
  char out_dir[512];           /* where metrics, checkpoints and summary.json are */
} kes_summary;

typedef struct kes_evaluation {
  double loss;
  double accuracy;  /* NaN for regression */
  int64_t samples;
} kes_evaluation;

/* Loads the config's data, picks its device and builds its model. */
kes_status kes_trainer_create(const kes_config* config, kes_trainer** trainer);
/* Trains as `kestrel train` does (quietly). resume: continue from the config's out folder. progress may
 * be NULL. */
kes_status kes_trainer_fit(kes_trainer* trainer, int32_t resume, kes_progress_fn progress, void* user_data,
                           kes_summary* summary);
kes_status kes_trainer_evaluate(kes_trainer* trainer, kes_evaluation* result);
/* Loads weights: a .safetensors file, a checkpoint.json, or a run folder. */
kes_status kes_trainer_load(kes_trainer* trainer, const char* path);
/* inputs: (N, ...the model's input shape) on any device (f32 values, or i64 token ids for a language
 * model) -> *outputs: the model's output (N, ...), in evaluation mode, on the trainer's device. */
kes_status kes_trainer_predict(kes_trainer* trainer, const kes_tensor* inputs, kes_tensor** outputs);
/* The trainer's device id ("cpu:0"), valid while the trainer lives. */
const char* kes_trainer_device(const kes_trainer* trainer);
void kes_trainer_free(kes_trainer* trainer);

/* ---- text generation -------------------------------------------------------------------------- */

/* A language model's sampling, as `kestrel generate` does it. Zero-initialise, set size to
 * sizeof(kes_generate_options) (fields added later will lie past what older callers set), then at least
 * prompt and tokens. */
typedef struct kes_generate_options {
  size_t size;
  const char* prompt;  /* UTF-8 text to continue; the model's vocabulary must have its characters */
  int64_t tokens;      /* how many to generate (at least 1) */
  double temperature;  /* the scores are divided by it before sampling; 0 picks the most likely */
  int64_t top_k;       /* sample among the k most likely only (0: all) */
  uint64_t seed;       /* the same seed, prompt and weights give the same text on every machine */
} kes_generate_options;

/* Receives each token's bytes as soon as it is sampled: `length` bytes, not NUL-terminated (a byte-level
 * vocabulary's token may be part of a UTF-8 character). */
typedef void (*kes_text_fn)(const char* text, size_t length, void* user_data);

/* Continues options->prompt with the trainer's model, which must have been trained on text data (the
 * config's "dataset": "text"; for a trained run without its corpus, set the config's "vocabulary_file" and
 * kes_trainer_load the run). on_text may be NULL. Where not NULL, *text receives the whole continuation,
 * NUL-terminated, to free with kes_text_free (NULL on failure), *text_length its length in bytes (a byte
 * vocabulary may sample a 0 byte), and *tokens_per_second the speed of sampling. */
kes_status kes_trainer_generate(kes_trainer* trainer, const kes_generate_options* options, kes_text_fn on_text,
                                void* user_data, char** text, size_t* text_length, double* tokens_per_second);
void kes_text_free(char* text);

#ifdef __cplusplus
}
#endif

#endif /* KESTREL_C_API_H */
