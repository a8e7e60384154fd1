// One process driving several devices: a Trainer per device, each on a thread of its own as a rank of an
// in-process world. Everything a rank does is what a process of a launched run does; only the World and
// ProcessGroup underneath meet in this process instead of over MPI or NCCL.
#include <fmt/format.h>

#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "../distributed/local_rendezvous.h"
#include "busy_guard.h"
#include "run_data.h"
#include "kestrel/trainer.h"

namespace kestrel {

namespace {

// Runs fn(rank) on a thread per rank. A rank that throws fails the rendezvous, so that the others stop
// waiting for it instead of running into their timeout; the first error thrown (the cause; the others'
// are PeerFailed) is rethrown once every thread has ended.
template <class Fn>
void on_every_rank(std::vector<World>& worlds, Fn fn) {
  worlds.front().rendezvous()->reset();  // a failure of an earlier call is forgotten
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

// The ranks' worlds, once the devices are known to exist and to differ. The devices are resolved here, on
// the calling thread, so the ranks' threads only look them up.
std::vector<World> worlds_for(const RunConfig& config, Engine& engine) {
  const std::vector<std::string>& devices = config.distributed.devices;
  if (devices.size() < 2)
    throw ConfigError(fmt::format("{}: /distributed/devices: several devices in one process need two or more, got {}; "
                                  "for one device use the backend preference (--backend)",
                                  config.source, devices.size()));
  std::set<std::string> seen;
  for (const std::string& spec : devices)
    if (!seen.insert(engine.device(spec).str()).second)
      throw ConfigError(fmt::format("{}: /distributed/devices: {} is {} again: one device per rank", config.source,
                                    spec, engine.device(spec).str()));
  return World::in_process(int(devices.size()));
}

// Why a call made from inside fit's progress callback is refused: every rank would have to join its
// collectives, and the other ranks are waiting in fit's.
std::string refusal_while_fitting(const char* what) {
  return fmt::format("{}: the devices are training (called from fit's progress callback); return false from the "
                     "callback to stop the run, then call it",
                     what);
}

}  // namespace

MultiDeviceTrainer::MultiDeviceTrainer(RunConfig config, Engine& engine)
    : worlds_(worlds_for(config, engine)), timeout_seconds_(config.distributed.timeout_seconds) {
  ranks_.resize(worlds_.size());
  // The data once for every rank (Fashion-MNIST's training set is 188 MB of floats): they only read it.
  const auto data = std::make_shared<SharedRunData>();
  // The trainers meet while they are built (the same run on every rank, rank 0's weights).
  on_every_rank(worlds_, [&](int r) {
    ranks_[size_t(r)] = std::make_unique<Trainer>(config, engine, worlds_[size_t(r)], data);
  });
}

MultiDeviceTrainer::~MultiDeviceTrainer() = default;

TrainSummary MultiDeviceTrainer::fit(const TrainOptions& options) {
  const BusyGuard fitting(fitting_, refusal_while_fitting("fit"));
  std::vector<TrainSummary> summaries(ranks_.size());
  on_every_rank(worlds_, [&](int r) {
    TrainOptions mine = options;
    if (r != 0) mine.quiet = true;  // rank 0 speaks for the run
    // Rank 0 asks the caller's callback; every rank then stops (or goes on) at the same step.
    if (options.on_step)
      mine.on_step = [&, r](const TrainProgress& progress) {
        const char answer = r == 0 && !options.on_step(progress) ? 's' : 'g';  // stop or go
        const std::vector<std::vector<char>> all = worlds_[size_t(r)].rendezvous()->exchange(
            r, {answer}, timeout_seconds_, fmt::format("step {}: rank 0's word on going on", progress.step));
        return all.front().front() == 'g';
      };
    summaries[size_t(r)] = ranks_[size_t(r)]->fit(mine);
  });
  return summaries.front();
}

EvalResult MultiDeviceTrainer::evaluate() {
  if (fitting_) throw InvalidArgument(refusal_while_fitting("evaluate"));
  std::vector<EvalResult> results(ranks_.size());
  on_every_rank(worlds_, [&](int r) { results[size_t(r)] = ranks_[size_t(r)]->evaluate(); });
  return results.front();
}

}  // namespace kestrel
