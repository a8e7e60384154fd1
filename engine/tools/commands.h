// The `kestrel` command-line tool: each subcommand registers itself on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kestrel::cli {

// Registers a subcommand; the returned action runs it and gives the process exit status.
using Action = std::function<int()>;
void add_devices_command(CLI::App& app, Action& action);
void add_conformance_command(CLI::App& app, Action& action);
void add_train_commands(CLI::App& app, Action& action);
void add_ops_command(CLI::App& app, Action& action);
void add_generate_command(CLI::App& app, Action& action);
void add_plan_command(CLI::App& app, Action& action);
void add_plot_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);

}  // namespace kestrel::cli
