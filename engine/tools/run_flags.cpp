// The flags every run-config command shares, applied to the config.
#include "run_flags.h"

#include <cstdlib>

#include "numeric_flags.h"

namespace kestrel::cli {

void add_run_flags(CLI::App* cmd, RunFlags& f) {
  cmd->add_option("config", f.config, "Run config (JSON), e.g. models/fashion_mlp.train.json")->required();
  add_integer_flag(cmd, "--train-subset", f.train_subset,
                   "Use only the first N training samples (0: all); synthetic classification data makes N", 0);
  add_integer_flag(cmd, "--test-subset", f.test_subset, "Use only the first N test samples (0: all); synthetic data makes N",
                   0);
  cmd->add_option("--backend", f.backend,
                  "Backend or device, or a comma-separated preference list (cuda:0 | vulkan | cpu | cuda,cpu). "
                  "Overrides KESTREL_BACKEND and the config");
  cmd->add_option("--precision", f.precision,
                  "Mixed precision: the products in bf16 or f16 (f16 with loss scaling) with f32 master weights (f32: "
                  "off). Overrides the config")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(precision_names), std::end(precision_names))));
}

RunConfig resolve(const RunFlags& f) {
  RunConfig config = RunConfig::load(f.config);
  std::string backends = f.backend;
  if (backends.empty())
    if (const char* env = std::getenv("KESTREL_BACKEND")) backends = env;
  if (!backends.empty()) config.set_backends(backends);
  if (f.epochs) config.epochs = *f.epochs;
  if (f.batch_size) config.batch_size = *f.batch_size;
  if (f.accumulate_steps) config.set_accumulate_steps(*f.accumulate_steps);
  if (f.max_steps) config.max_steps = *f.max_steps;
  if (f.seed) config.seed = static_cast<uint64_t>(*f.seed);
  if (f.lr) config.optimizer.lr = *f.lr;
  if (f.clip_grad_norm) config.optimizer.clip_grad_norm = *f.clip_grad_norm;
  if (f.bucket_mb) config.distributed.bucket_cap_mb = *f.bucket_mb;
  if (f.collective_timeout) config.distributed.timeout_seconds = *f.collective_timeout;
  // Subsets cut file datasets and size synthetic ones.
  if (f.train_subset) config.data.train_subset = *f.train_subset;
  // Synthetic regression draws its test samples after the training ones: its training split is cut
  // instead, since sizing it would move them.
  if (f.train_subset > 0 && config.data.dataset != "synthetic-regression") config.data.train_samples = *f.train_subset;
  if (f.test_subset) config.data.test_subset = *f.test_subset;
  if (f.test_subset > 0) config.data.test_samples = *f.test_subset;
  if (!f.out.empty()) config.out_dir = f.out;
  if (f.no_capture) config.capture = false;
  if (f.detect_anomaly) config.detect_anomaly = true;
  if (!f.precision.empty()) config.precision = parse_dtype(f.precision);
  if (f.fit) config.fit_memory = true;
  if (!f.devices.empty()) config.set_devices(f.devices);
  return config;
}

}  // namespace kestrel::cli
