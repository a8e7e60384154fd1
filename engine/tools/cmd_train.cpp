// `kestrel train`, `eval`, `predict` and `check`: the model and run-config workflow.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "commands.h"
#include "numeric_flags.h"
#include "run_flags.h"
#include "kestrel/trainer.h"

namespace kestrel::cli {

namespace {

std::string percent(double fraction) { return std::isnan(fraction) ? "n/a" : fmt::format("{:.2f}%", fraction * 100); }

}  // namespace

void add_train_commands(CLI::App& app, Action& action) {
  static RunFlags train, eval, predict;
  static std::string model_file;

  auto* t = app.add_subcommand("train", "Train the model of a run config on the best available backend");
  add_run_flags(t, train);
  add_integer_flag(t, "--epochs", train.epochs, "Number of epochs", 1);
  add_integer_flag(t, "--batch-size", train.batch_size, "Samples per optimizer step", 1);
  add_integer_flag(t, "--accumulate-steps", train.accumulate_steps,
                   "Micro-batches per optimizer step (gradient accumulation; must divide the batch size)", 1);
  add_integer_flag(t, "--max-steps", train.max_steps, "Stop after this many optimizer steps (0: no limit)", 0);
  add_integer_flag(t, "--seed", train.seed, "Random seed", 0);
  add_number_flag(t, "--lr", train.lr, "Learning rate", 0, kMaxLearningRate);
  add_number_flag(t, "--clip-grad-norm", train.clip_grad_norm,
                  "Clip the gradients' global L2 norm to this before each update, as torch's clip_grad_norm_ "
                  "(0: no clipping)",
                  0, kMaxClipNorm);
  t->add_option("--out", train.out, "Output folder for metrics, checkpoints, summary and plot");
  t->add_flag("--resume", train.resume, "Continue from OUT/checkpoint.json");
  t->add_flag("--progress", train.progress, "Always draw a progress bar");
  t->add_flag("--no-progress", train.no_progress, "Print plain lines instead of a progress bar");
  t->add_flag("--quiet", train.quiet, "Print only the final result");
  t->add_flag("--no-capture", train.no_capture,
              "Launch every op of every step instead of replaying a captured step (for debugging)");
  t->add_flag("--fit", train.fit,
              "Split each batch into the fewest micro-batches whose step fits in the device's free memory (kestrel "
              "plan shows the figures); like \"accumulate_steps\": \"auto\"");
  add_number_flag(t, "--bucket-mb", train.bucket_mb,
                  "Data parallelism: sum gradients over the ranks in buckets of about this many MiB (default 25)", 0.001,
                  1 << 16);
  t->add_option("--devices", train.devices,
                 "Data parallelism in one process: a comma-separated list of devices, one rank each on a thread of "
                 "its own (cuda:0,cuda:1; cpu:0,cpu:1 with KESTREL_CPU_DEVICES=2). Overrides distributed.devices");
  add_number_flag(t, "--collective-timeout", train.collective_timeout,
                  "Data parallelism: seconds a collective waits for the other ranks before the run stops (default 60)",
                  0.1, 86400);
  t->add_flag("--detect-anomaly", train.detect_anomaly,
              "Stop at the first op whose output or gradient is NaN or infinite, naming it and its layer (slow: "
              "a device read per op)");
  t->callback([&action] {
    action = [] {
      const RunConfig config = resolve(train);
      TrainOptions options;
      options.resume = train.resume;
      options.quiet = train.quiet;
      options.progress = train.progress ? 1 : train.no_progress ? 0 : -1;
      TrainSummary s;
      if (!config.distributed.devices.empty()) {  // several devices of this process
        s = MultiDeviceTrainer(config).fit(options);
      } else {
        Trainer trainer(config);
        s = trainer.fit(options);
        if (!trainer.world().is_root()) return 0;  // rank 0 speaks for a data-parallel run
      }
      fmt::print("final: {} steps on {}, test loss {:.4f}, test accuracy {}, {:.0f} samples/s; outputs in {}\n", s.steps,
                 s.device, s.test.loss, percent(s.test.accuracy), s.samples_per_second, s.out_dir);
      return 0;
    };
  });

  auto* e = app.add_subcommand("eval", "Evaluate a checkpoint on the test data of a run config");
  add_run_flags(e, eval);
  e->add_option("--checkpoint", eval.checkpoint, "A .safetensors weights file, checkpoint.json, or a run folder")->required();
  e->callback([&action] {
    action = [] {
      Trainer trainer(resolve(eval));
      trainer.load_weights(eval.checkpoint);
      EvalResult r = trainer.evaluate();
      fmt::print("{} on {}: {} test samples, loss {:.4f}, accuracy {}\n", trainer.model().spec().name(),
                 trainer.device().str(), r.samples, r.loss, percent(r.accuracy));
      return 0;
    };
  });

  auto* p = app.add_subcommand("predict", "Show a few test samples with the model's top classes");
  add_run_flags(p, predict);
  p->add_option("--checkpoint", predict.checkpoint, "A .safetensors weights file, checkpoint.json, or a run folder")->required();
  add_integer_flag(p, "--count", predict.count, "How many samples (default 5)", 1, 10000);
  p->callback([&action] {
    action = [] {
      Trainer trainer(resolve(predict));
      if (!trainer.test_data().is_classification())
        throw InvalidArgument("predict shows classes; this run config's data is regression (use eval)");
      trainer.load_weights(predict.checkpoint);
      int64_t index = 0;
      for (const Prediction& pr : trainer.predict(predict.count.value_or(5))) {
        std::string tops;
        for (auto [cls, prob] : pr.top) tops += fmt::format("  {} {:.1f}%", trainer.class_name(cls), prob * 100);
        fmt::print("sample {}: true {:<12} predicted{}{}\n", index++, trainer.class_name(pr.label), tops,
                   pr.top.front().first == pr.label ? "" : "   (wrong)");
      }
      return 0;
    };
  });

  auto* c = app.add_subcommand("check", "Validate a model file and print its layers, shapes and parameters");
  c->add_option("model", model_file, "Model file (JSON)")->required();
  c->callback([&action] {
    action = [] {
      fmt::print("{}", ModelSpec::load(model_file).summary());
      return 0;
    };
  });

  auto* s = app.add_subcommand("schema", "Print the JSON Schema of model files, generated from the known layer kinds");
  s->callback([&action] {
    action = [] {
      fmt::print("{}", model_schema());
      return 0;
    };
  });
}

}  // namespace kestrel::cli
