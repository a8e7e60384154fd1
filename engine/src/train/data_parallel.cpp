#include "data_parallel.h"

#include <fmt/format.h>
#include <unistd.h>

#include <climits>

namespace kestrel {

namespace {

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// The first line on which some rank differs from rank 0, as "what differs": rank 0 says A, rank 2 says B.
std::string first_difference(const std::vector<std::string>& ranks_text) {
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
      out.push_back(text.substr(start, end - start));
    return out;
  };
  const std::vector<std::string> root = lines(ranks_text.front());
  for (size_t r = 1; r < ranks_text.size(); ++r) {
    const std::vector<std::string> theirs = lines(ranks_text[r]);
    for (size_t i = 0; i < std::max(root.size(), theirs.size()); ++i) {
      const std::string a = i < root.size() ? root[i] : "(nothing)", b = i < theirs.size() ? theirs[i] : "(nothing)";
      if (a != b) return fmt::format("rank 0 has {} but rank {} has {}", a, r, b);
    }
  }
  return "";
}

}  // namespace

Device rank_device(Engine& engine, const Device& selected, World& world, const RunConfig& config) {
  // The host's processor, and a GPU API emulated on it (lavapipe), are shared by every rank on a machine.
  const std::string kind = engine.properties(selected).kind;
  if (!world.distributed() || kind == "cpu" || kind == "software") return selected;
  const int available = engine.device_count(selected.backend());
  if (world.local_rank() >= available)
    throw ConfigError(fmt::format("{}: rank {} is number {} of {} ranks on {}, which has {} {} device(s): one device "
                                  "per rank; start at most {} ranks per machine",
                                  config.source, world.rank(), world.local_rank() + 1, world.local_size(), host_name(),
                                  available, selected.backend(), available));
  Device mine = engine.device(fmt::format("{}:{}", selected.backend(), world.local_rank()));
  const std::vector<std::string> all = world.all_gather(host_name() + " " + mine.str());
  for (int a = 0; a < world.size(); ++a)
    for (int b = a + 1; b < world.size(); ++b)
      if (all[a] == all[b])
        throw ConfigError(fmt::format("ranks {} and {} both took {}: one device per rank (the launcher gave two ranks "
                                      "the same local rank)",
                                      a, b, all[a]));
  return mine;
}

void check_batch_split(const World& world, const RunConfig& config) {
  const DistributedConfig& d = config.distributed;
  if (d.deterministic) {
    if (config.batch_size % d.shards != 0)
      throw ConfigError(fmt::format("{}: /distributed/shards: {} micro-shards do not divide /batch_size ({}); give a "
                                    "divisor of the batch size",
                                    config.source, d.shards, config.batch_size));
    if (d.shards % world.size() != 0)
      throw ConfigError(fmt::format("{}: /distributed/shards: {} micro-shards do not divide among {} ranks; deterministic "
                                    "mode runs on a number of ranks dividing the shards",
                                    config.source, d.shards, world.size()));
    return;
  }
  const int64_t per_step = int64_t(world.size()) * config.accumulate_steps;
  if (config.batch_size % per_step != 0)
    throw ConfigError(fmt::format("{}: /batch_size: {} samples do not divide among {} ranks x {} micro-batches "
                                  "(accumulate_steps): batch_size is the global batch; give a multiple of {}",
                                  config.source, config.batch_size, world.size(), config.accumulate_steps, per_step));
}

void check_same_run(World& world, const RunConfig& config, Model& model, int64_t train_samples) {
  if (!world.distributed()) return;
  // What each rank's steps depend on: a difference makes the ranks' gradients disagree, or their
  // collectives mismatch and hang.
  const OptimizerConfig& o = config.optimizer;
  std::string settings = fmt::format(
      "model file {} (SHA-256 {})\nbatch_size {}\naccumulate_steps {}\nseed {}\nepochs {}\nmax_steps {}\n"
      "optimizer {} lr {} betas {} {} eps {} weight_decay {} momentum {} clip_grad_norm {}\ntraining samples {}\nlog_every {}\n"
      "checkpoint every_steps {}\ndistributed bucket_cap_mb {} timeout_seconds {} deterministic {} shards {} shard_optimizer {}\nout {}\n"
      "drop_last {}\nprecision {}\nloss_scale {} {} {} {}\nschedule {} step_size {} gamma {} warmup_steps {} min_lr {}\n",
      model.spec().source(), model.spec().fingerprint(), config.batch_size, config.accumulate_steps, config.seed,
      config.epochs, config.max_steps, optimizer_kind_names[int(o.type)], o.lr, o.beta1, o.beta2, o.eps,
      o.weight_decay, o.momentum, o.clip_grad_norm, train_samples, config.log_every, config.checkpoint_every,
      config.distributed.bucket_cap_mb, config.distributed.timeout_seconds, config.distributed.deterministic,
      config.distributed.shards, config.distributed.shard_optimizer, config.out_dir, config.drop_last,
      dtype_name(config.precision), config.loss_scale.init_scale, config.loss_scale.growth_factor,
      config.loss_scale.backoff_factor, config.loss_scale.growth_interval, schedule_kind_names[int(config.schedule.type)],
      config.schedule.step_size, config.schedule.gamma, config.schedule.warmup_steps, config.schedule.min_lr);
  if (std::string differs = first_difference(world.all_gather(settings)); !differs.empty())
    throw ConfigError(fmt::format("{}: the ranks run different configurations: {}; start every rank with the same run "
                                  "config, flags and data",
                                  config.source, differs));
  std::string parameters;
  for (auto& p : model.parameters())
    parameters += fmt::format("parameter {} {} {}\n", p.name, shape_str(p.var.value().shape()),
                              dtype_name(p.var.value().dtype()));
  if (std::string differs = first_difference(world.all_gather(parameters)); !differs.empty())
    throw ConfigError(fmt::format("{}: the ranks' models differ: {}; every rank must build the same model",
                                  config.source, differs));
}

void broadcast_model(ProcessGroup& group, Model& model) {
  group.broadcast(model.flat_parameters(), 0, "rank 0's parameters");
  broadcast_buffers(group, model, "sharing rank 0's parameters");
  // broadcast_buffers waits only when there are buffers; the first step must not read parameters still
  // being written either way.
  if (model.buffers().empty()) group.wait("sharing rank 0's parameters");
}

void broadcast_buffers(ProcessGroup& group, Model& model, const std::string& context) {
  if (model.buffers().empty()) return;
  for (auto& [name, buffer] : model.buffers()) group.broadcast(buffer, 0, "rank 0's " + name);
  group.wait(context);
}

}  // namespace kestrel
