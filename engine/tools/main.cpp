// kestrel: list devices, check backends, train and evaluate models.
#include <fmt/format.h>

#include <exception>

#include "commands.h"
#include "kestrel/distributed.h"
#include "kestrel/error.h"

namespace {

// Says what went wrong and gives the exit status. In a data-parallel run this rank's failure ends every
// rank (MPI_Abort), which would otherwise wait for it until their collectives' timeout.
int failed(int status, const char* what) {
  bool distributed = false;
  try {
    distributed = kestrel::World::get().distributed();
  } catch (const std::exception&) {
    // no world to end: this process alone
  }
  if (!distributed) {
    fmt::print(stderr, "kestrel: {}\n", what);
    return status;
  }
  kestrel::World& world = kestrel::World::get();
  fmt::print(stderr, "kestrel: rank {} of {}: {}\nkestrel: rank {}: ending every rank of the run (exit status {})\n",
             world.rank(), world.size(), what, world.rank(), status);
  world.abort(status);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kestrel: train neural networks described in JSON on any backend (cpu, cuda, vulkan)"};
  app.require_subcommand(1);
  kestrel::cli::Action action;
  kestrel::cli::add_devices_command(app, action);
  kestrel::cli::add_conformance_command(app, action);
  kestrel::cli::add_train_commands(app, action);
  kestrel::cli::add_generate_command(app, action);
  kestrel::cli::add_plan_command(app, action);
  kestrel::cli::add_plot_command(app, action);
  kestrel::cli::add_export_command(app, action);
  kestrel::cli::add_ops_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a bad flag is bad input like a bad config: 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return action();
  } catch (const kestrel::InvalidArgument& e) {
    return failed(2, e.what());
  } catch (const kestrel::NonFiniteLossError& e) {
    return failed(3, e.what());
  } catch (const kestrel::PeerFailed& e) {
    return failed(4, e.what());
  } catch (const std::exception& e) {
    return failed(1, e.what());
  }
}
