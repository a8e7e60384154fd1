// checkpoint.json: where a run stood when its checkpoint was written, and the weights file that goes
// with it. Engine-internal.
#pragma once
#include <cstdint>
#include <string>

#include "train_state.h"

namespace kestrel {

struct CheckpointState {
  std::string weights;         // the weights file, relative to the run folder: weights_file_name(train.step)
  std::string weights_sha256;  // of the weights file's bytes
  std::string model_source, model_fingerprint, config_source, device;
  std::string vocabulary_sha256;  // text data: its vocabulary's fingerprint; empty for other data
  uint64_t seed = 0;
  int64_t optimizer_steps = 0;
  TrainState train;
};

// "checkpoints/step-000000123.safetensors": a checkpoint names no other file.
std::string weights_file_name(int64_t step);
// Before a fresh (not resumed) run into `out_dir`: removes an earlier run's checkpoint.json, weight files
// and TensorBoard event files. Returns a message saying so when there were any, else "".
std::string clear_previous_run(const std::string& out_dir);

// The JSON text, with "state_sha256" over everything else: weights_sha256 is among what it covers, so
// one digest protects the state and the weights. It detects edits and damage, not a forger (anyone
// can recompute it).
std::string encode_checkpoint_state(const CheckpointState& state);

// Parses and checks everything that can be checked without the run: the format, the digest, each
// field's type and range, and their consistency with each other. Throws InvalidArgument
// "<path>: /<field>: ... unusable checkpoint ..." naming what is wrong and what to do.
CheckpointState decode_checkpoint_state(const std::string& text, const std::string& path);

// The same error, for the checks made against the run (Trainer::restore_checkpoint).
[[noreturn]] void unusable_checkpoint(const std::string& path, const std::string& what);

}  // namespace kestrel
