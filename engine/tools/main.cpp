// kestrel: list devices, check backends, train and evaluate models.
#include <fmt/format.h>

#include <exception>

#include "commands.h"
#include "kestrel/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Kestrel: train neural networks described in JSON on any backend (cpu, cuda, vulkan)"};
  app.require_subcommand(1);
  kestrel::cli::Action action;
  kestrel::cli::add_devices_command(app, action);
  kestrel::cli::add_conformance_command(app, action);
  kestrel::cli::add_train_commands(app, action);
  kestrel::cli::add_generate_command(app, action);
  kestrel::cli::add_plan_command(app, action);
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
    fmt::print(stderr, "kestrel: {}\n", e.what());
    return 2;
  } catch (const kestrel::NonFiniteLossError& e) {
    fmt::print(stderr, "kestrel: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kestrel: {}\n", e.what());
    return 1;
  }
}
