// The trainer's data-parallel setup: the device each rank takes, the checks that every rank runs the same
// thing, and rank 0's parameters for all. Engine-internal.
#pragma once
#include <string>

#include "kestrel/config.h"
#include "kestrel/distributed.h"
#include "kestrel/engine.h"
#include "kestrel/model.h"

namespace kestrel {

// `selected` for this rank: a GPU backend's device `local_rank` (one device per rank); the CPU, and a
// GPU API emulated on it (lavapipe), is shared by the ranks on a machine. Throws ConfigError when the
// machine has fewer devices than ranks on it, or when two ranks on one machine ended up on one GPU.
Device rank_device(Engine& engine, const Device& selected, World& world, const RunConfig& config);

// Throws ConfigError when the global batch does not divide among the ranks (and their micro-batches, or
// the deterministic mode's shards), naming the keys.
void check_batch_split(const World& world, const RunConfig& config);

// Throws ConfigError naming the ranks and the setting when the ranks' configurations differ in anything
// that would make their steps disagree; and naming the parameter when their models' parameters differ.
void check_same_run(World& world, const RunConfig& config, Model& model, int64_t train_samples);

// Every rank's parameters and buffers (running statistics) become rank 0's.
void broadcast_model(ProcessGroup& group, Model& model);
// Every rank's buffers become rank 0's (as DDP's broadcast_buffers does before each forward): each rank's
// batch-norm statistics come from its own share of the batch. context: for a failure's message.
void broadcast_buffers(ProcessGroup& group, Model& model, const std::string& context);

}  // namespace kestrel
