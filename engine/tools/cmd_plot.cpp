// `kestrel plot RUN [RUN...]`: several runs' curves overlaid in one SVG (kestrel/plot.h).
#include <fmt/format.h>

#include "commands.h"
#include "kestrel/io.h"
#include "kestrel/plot.h"

namespace kestrel::cli {

void add_plot_command(CLI::App& app, Action& action) {
  static std::vector<std::string> runs;
  static std::string out = "plot.svg";
  auto* p = app.add_subcommand("plot", "Overlay the loss and accuracy curves of training runs in one SVG");
  p->add_option("runs", runs, "Run output folders (each with its metrics.jsonl)")->required();
  p->add_option("--out", out, "The SVG file to write")->capture_default_str();
  p->callback([&action] {
    action = [] {
      std::vector<RunCurves> curves;
      for (const std::string& run : runs) curves.push_back(read_run_curves(run));
      io::write_file_atomically(out, plot_svg(curves));
      fmt::print("wrote {} ({} run{})\n", out, curves.size(), curves.size() == 1 ? "" : "s");
      return 0;
    };
  });
}

}  // namespace kestrel::cli
