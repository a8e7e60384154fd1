// The flags every run-config command shares (train, eval, predict, generate), and the config they give.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "kestrel/config.h"

namespace kestrel::cli {

struct RunFlags {
  std::string config, backend, out, checkpoint, precision, devices;
  std::optional<int64_t> epochs, batch_size, accumulate_steps, max_steps, seed, count, train_subset, test_subset;
  std::optional<double> lr, clip_grad_norm, bucket_mb, collective_timeout;
  bool resume = false, quiet = false, no_progress = false, progress = false, no_capture = false,
       detect_anomaly = false, fit = false;
};

// The config positional, the subsets and --backend.
void add_run_flags(CLI::App* cmd, RunFlags& f);
// The run config with the flags (and KESTREL_BACKEND) applied.
RunConfig resolve(const RunFlags& f);

}  // namespace kestrel::cli
