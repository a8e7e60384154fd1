// `kestrel devices`: every plugin found, loaded or skipped with its reason, and every device.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "kestrel/engine.h"
#include "kestrel/ops.h"

namespace kestrel::cli {
namespace {

std::string gib(uint64_t bytes) { return fmt::format("{:.1f} GiB", bytes / double(1ull << 30)); }

std::vector<std::string> dtype_names(const std::vector<DType>& dtypes) {
  std::vector<std::string> names;
  for (DType dtype : dtypes) names.emplace_back(dtype_name(dtype));
  return names;
}

nlohmann::json to_json(const PluginInfo& plugin) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : plugin.devices)
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"kind", d.kind},
                       {"memory_total", d.memory_total},
                       {"memory_free", d.memory_free},
                       {"arch", d.arch},
                       {"compute_units", d.compute_units},
                       {"runtime", d.runtime},
                       {"dtypes", dtype_names(d.dtypes)}});
  return {{"name", plugin.name},         {"version", plugin.version}, {"abi", plugin.abi},
          {"status", plugin.loaded ? "loaded" : "skipped"},       {"reason", plugin.reason},
          {"path", plugin.path},         {"priority", plugin.priority}, {"devices", devices}};
}

void print_table(const Engine& engine) {
  fmt::print("Kestrel {} (plugin ABI {}.{})\n", KESTREL_VERSION, KESTREL_PLUGIN_ABI_MAJOR, KESTREL_PLUGIN_ABI_MINOR);
  if (engine.plugins().empty()) fmt::print("No plugins found. Set KESTREL_PLUGIN_PATH to the plugin folder.\n");
  for (const auto& plugin : engine.plugins()) {
    if (!plugin.loaded) {
      fmt::print("  {:<10} skipped: {}\n             {}\n", plugin.name, plugin.reason, plugin.path);
      continue;
    }
    fmt::print("  {:<10} loaded   version {}, ABI {}, priority {}\n             {}\n", plugin.name, plugin.version,
               plugin.abi, plugin.priority, plugin.path);
    for (const auto& d : plugin.devices) {
      fmt::print("    {}:{}  {} ({})\n", plugin.name, d.index, d.name, d.kind);
      fmt::print("          memory {} total, {} free; {} compute units; arch {}\n", gib(d.memory_total),
                 gib(d.memory_free), d.compute_units, d.arch);
      fmt::print("          runtime {}; dtypes {}\n", d.runtime, fmt::join(dtype_names(d.dtypes), " "));
    }
  }
}

// A short computation on every device: a 256x256 matmul, relu and sum, checked against the host.
int run_checks(Engine& engine) {
  const int64_t n = 256;
  std::vector<float> a(n * n), b(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = std::sin(0.001f * i);
    b[i] = std::cos(0.002f * i);
  }
  double expected = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += double(a[i * n + k]) * b[k * n + j];
      expected += dot > 0 ? dot : 0;
    }
  int failures = 0;
  for (const auto& plugin : engine.plugins()) {
    if (!plugin.loaded) continue;
    for (const auto& d : plugin.devices) {
      Device device = engine.device(fmt::format("{}:{}", plugin.name, d.index));
      auto start = std::chrono::steady_clock::now();
      Tensor ta = Tensor::from_vector(a, {n, n}, device), tb = Tensor::from_vector(b, {n, n}, device);
      Tensor product = ops::unary(KESTREL_UNARY_RELU, ops::matmul(ta, tb));
      double got = ops::reduce(KESTREL_REDUCE_SUM, product).to_doubles()[0];
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      double relative = std::abs(got - expected) / std::abs(expected);
      bool ok = relative < 1e-4;
      failures += !ok;
      fmt::print("check {}: sum(relu(A @ B)) = {:.6g}, host reference {:.6g}, relative error {:.1e} ({:.1f} ms) {}\n",
                 device.str(), got, expected, relative, ms, ok ? "ok" : "WRONG");
    }
  }
  return failures ? 1 : 0;
}

}  // namespace

void add_devices_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("devices", "List backend plugins (loaded or skipped, with the reason) and devices");
  static bool json = false, check = false;
  cmd->add_flag("--json", json, "Print as JSON");
  cmd->add_flag("--check", check, "Also run a short computation on every device and compare with the host");
  cmd->callback([&action] {
    action = [] {
      Engine& engine = Engine::global();
      if (json) {
        nlohmann::json plugins = nlohmann::json::array();
        for (const auto& plugin : engine.plugins()) plugins.push_back(to_json(plugin));
        // Paths from the environment may hold bytes that are not UTF-8: shown replaced, not refused.
        fmt::print("{}\n", nlohmann::json{{"plugins", plugins}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      } else {
        print_table(engine);
      }
      return check ? run_checks(engine) : 0;
    };
  });
}

}  // namespace kestrel::cli
