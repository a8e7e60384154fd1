// `kestrel plan`: what a run config's training will hold on its device, and whether it fits.
#include <fmt/format.h>

#include "commands.h"
#include "kestrel/trainer.h"
#include "numeric_flags.h"
#include "run_flags.h"

namespace kestrel::cli {

void add_plan_command(CLI::App& app, Action& action) {
  static RunFlags run;
  auto* p = app.add_subcommand("plan", "Predict a run's peak memory per layer and in total, say whether it fits on "
                                       "the device, and suggest micro-batches that do");
  add_run_flags(p, run);
  add_integer_flag(p, "--batch-size", run.batch_size, "Plan for this batch size instead of the config's", 1);
  add_integer_flag(p, "--accumulate-steps", run.accumulate_steps, "Plan for this many micro-batches per step", 1);
  p->callback([&action] {
    action = [] {
      Trainer trainer(resolve(run));
      fmt::print("{}", trainer.plan_memory().report());
      return 0;
    };
  });
}

}  // namespace kestrel::cli
