// One process driving several devices: a Trainer per device, each on a thread of its own as a rank of an
// in-process world. Everything a rank does is what a process of a launched run does; only the World and
// ProcessGroup underneath meet in this process instead of over MPI or NCCL.
#include <fmt/format.h>

#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "../distributed/local_rendezvous.h"
#include "kestrel/trainer.h"

namespace kestrel {

namespace {

// Runs fn(rank) on a thread per rank. A rank that throws fails the rendezvous, so that the others stop
// waiting for it instead of running into their timeout; the first error thrown (the cause; the others'
// are PeerFailed) is rethrown once every thread has ended.
template <class Fn>
void on_every_rank(std::vector<World>& worlds, Fn fn) {
  std::vector<std::exception_ptr> errors(worlds.size());
  std::mutex first_mutex;
  int first = -1;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < worlds.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        fn(int(r));
      } catch (...) {
        errors[r] = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(first_mutex);
          if (first < 0) first = int(r);
        }
        worlds[r].rendezvous()->fail(fmt::format("rank {} of this process stopped with an error", r));
      }
    });
  for (std::thread& t : threads) t.join();
  if (first >= 0) std::rethrow_exception(errors[size_t(first)]);
}

std::vector<World> worlds_for(const RunConfig& config) {
  const std::vector<std::string>& devices = config.distributed.devices;
  if (devices.size() < 2)
    throw ConfigError(fmt::format("{}: /distributed/devices: several devices in one process need two or more, got {}; "
                                  "for one device use the backend preference (--backend)",
                                  config.source, devices.size()));
  if (std::set<std::string>(devices.begin(), devices.end()).size() != devices.size())
    throw ConfigError(fmt::format("{}: /distributed/devices names a device twice: one device per rank", config.source));
  return World::in_process(int(devices.size()));
}

}  // namespace

MultiDeviceTrainer::MultiDeviceTrainer(RunConfig config, Engine& engine) : worlds_(worlds_for(config)) {
  ranks_.resize(worlds_.size());
  // The trainers meet while they are built (the same run on every rank, rank 0's weights).
  on_every_rank(worlds_, [&](int r) { ranks_[size_t(r)] = std::make_unique<Trainer>(config, engine, worlds_[size_t(r)]); });
}

MultiDeviceTrainer::~MultiDeviceTrainer() = default;

TrainSummary MultiDeviceTrainer::fit(const TrainOptions& options) {
  std::vector<TrainSummary> summaries(ranks_.size());
  on_every_rank(worlds_, [&](int r) {
    TrainOptions mine = options;
    if (r != 0) mine.quiet = true;  // rank 0 speaks for the run
    // Rank 0 asks the caller's callback; every rank then stops (or goes on) at the same step.
    if (options.on_step)
      mine.on_step = [&, r](const TrainProgress& progress) {
        const std::string answer = r == 0 ? (options.on_step(progress) ? "go" : "stop") : "";
        return worlds_[size_t(r)].all_gather(answer).front() == "go";
      };
    summaries[size_t(r)] = ranks_[size_t(r)]->fit(mine);
  });
  return summaries.front();
}

}  // namespace kestrel
