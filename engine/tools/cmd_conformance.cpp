// `kestrel conformance --backend NAME`: does this backend compute correctly? Runs the conformance suite
// on its devices and prints a pass/fail summary (exit status 1 on any failure or when nothing ran, unless
// the one family asked for is an optional one the plugin does not offer).
#include <fmt/format.h>

#include "commands.h"
#include "conformance.hpp"
#include "kestrel/engine.h"

namespace kestrel::cli {

void add_conformance_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("conformance", "Check a backend plugin against double-precision references");
  static std::string backend, family, filter;
  static bool verbose = false;
  cmd->add_option("--backend", backend, "Backend or device to check: cpu, cuda:0, ...")->required();
  cmd->add_option("--family", family, "Only this op family")
      ->check(CLI::IsMember(conformance::families()));
  cmd->add_option("--filter", filter, "Only cases whose name contains this text, e.g. gemm/f32");
  cmd->add_flag("-v,--verbose", verbose, "Print every case");
  cmd->callback([&action] {
    action = [] {
      Engine& engine = Engine::global();
      std::vector<std::string> specs;
      if (backend.find(':') != std::string::npos) {
        specs.push_back(backend);
      } else {
        engine.device(backend);  // a clear error when the backend is unavailable
        for (int i = 0; i < engine.device_count(backend); ++i) specs.push_back(fmt::format("{}:{}", backend, i));
      }
      int status = 0;
      for (const auto& spec : specs) {
        Device device = engine.device(spec);
        auto summary = conformance::run(device, family, filter, [](const conformance::CaseResult& c) {
          if (verbose || c.outcome == "failed")
            fmt::print("{:<12} {}{}\n", c.outcome, c.name, c.detail.empty() ? "" : "\n             " + c.detail);
        });
        // One family asked for whose cases are all optional and all declined (a fused family the plugin does
        // not offer): nothing to check, not a failure. The whole suite declined is one: nothing was tested.
        const bool family_not_offered = summary.run == 0 && summary.unsupported > 0 && !family.empty() && filter.empty();
        const bool ok = summary.failed == 0 && (summary.run > 0 || family_not_offered);
        fmt::print("{}: {} cases run, {} passed, {} failed; {} optional combinations unsupported: {}\n", device.str(),
                   summary.run, summary.passed, summary.failed, summary.unsupported,
                   family_not_offered ? "NOT OFFERED" : ok ? "PASS" : "FAIL");
        if (family_not_offered)
          fmt::print("  the plugin offers none of the {} family's optional ops; the engine composes them\n", family);
        else if (summary.run == 0)
          fmt::print("  no case ran: the filter matched nothing, or the plugin declined every op\n");
        if (!ok) status = 1;
      }
      return status;
    };
  });
}

}  // namespace kestrel::cli
