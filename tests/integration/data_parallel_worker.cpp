// One rank of a data-parallel run driven through the C++ API (or a single process, or one process driving
// the devices its config's distributed.devices names): trains a run config and writes each of its ranks'
// final parameters as raw f32 to OUT/params.rank<R>.f32, so test_data_parallel can compare them across
// ranks and world sizes.
//
//   data_parallel_worker CONFIG OUT [--interrupt-after STEPS] [--resume] [--stop-on-rank R STEP]
//
// --stop-on-rank: rank R's progress callback asks to stop after STEP (the others' never do); each rank
// then writes the steps it trained to OUT/steps.rank<R>.
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kestrel/trainer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: data_parallel_worker CONFIG OUT [--interrupt-after STEPS] [--resume] [--stop-on-rank R STEP]\n");
    return 2;
  }
  try {
    kestrel::RunConfig config = kestrel::RunConfig::load(argv[1]);
    config.out_dir = argv[2];
    kestrel::TrainOptions options;
    options.quiet = true;
    for (int i = 3; i < argc; ++i) {
      if (std::strcmp(argv[i], "--resume") == 0) options.resume = true;
      if (std::strcmp(argv[i], "--interrupt-after") == 0 && i + 1 < argc) options.interrupt_after = std::stoll(argv[++i]);
      if (std::strcmp(argv[i], "--stop-on-rank") == 0 && i + 2 < argc) {
        const int stopping = std::stoi(argv[++i]);
        const int64_t after = std::stoll(argv[++i]);
        options.on_step = [stopping, after](const kestrel::TrainProgress& progress) {
          return !(kestrel::World::get().rank() == stopping && progress.step >= after);
        };
      }
    }
    auto write_parameters = [&](kestrel::Trainer& trainer) {
      std::vector<float> values;
      for (double v : trainer.model().flat_parameters().to_doubles()) values.push_back(static_cast<float>(v));
      std::ofstream out(fmt::format("{}/params.rank{}.f32", config.out_dir, trainer.world().rank()), std::ios::binary);
      out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
      return bool(out);
    };
    if (!config.distributed.devices.empty()) {  // several devices of this process: a file per rank
      kestrel::MultiDeviceTrainer trainers(config);
      for (int r = 1; r < trainers.size(); ++r)
        if (&trainers.rank(r).train_data() != &trainers.rank(0).train_data()) {
          fmt::print(stderr, "data_parallel_worker: rank {} holds its own copy of the training data\n", r);
          return 1;
        }
      trainers.fit(options);
      bool written = true;
      for (int r = 0; r < trainers.size(); ++r) written = write_parameters(trainers.rank(r)) && written;
      return written ? 0 : 1;
    }
    kestrel::Trainer trainer(config);
    const kestrel::TrainSummary summary = trainer.fit(options);
    if (options.on_step)
      std::ofstream(fmt::format("{}/steps.rank{}", config.out_dir, trainer.world().rank())) << summary.steps << "\n";
    return write_parameters(trainer) ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "data_parallel_worker: {}\n", e.what());
    if (kestrel::World::get().distributed()) kestrel::World::get().abort(1);
    return 1;
  }
}
