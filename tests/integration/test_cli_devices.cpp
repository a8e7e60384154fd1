// `kestrel devices` and `kestrel conformance` as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "kestrel/io.h"
#include "kestrel/plugin.h"

namespace {

CliRun run(const std::string& args, const std::string& env = "") { return run_cli(args, env); }

const std::string fault_path = std::string("KESTREL_PLUGIN_PATH=") + KESTREL_FAULT_PLUGIN_DIR;

TEST(CliDevices, JsonShowsTheCpuPluginAndTheSkippedOnes) {
  CliRun r = run("devices --json", fault_path);
  ASSERT_EQ(r.status, 0) << r.output;
  auto json = nlohmann::json::parse(r.output);
  // The engine reports canonical paths (the build folder may be reached through a symbolic link).
  const std::string fault_dir = std::filesystem::weakly_canonical(KESTREL_FAULT_PLUGIN_DIR).string();
  bool cpu_seen = false;
  int skipped = 0;
  for (const auto& plugin : json.at("plugins")) {
    if (plugin.at("name") == "cpu") {
      cpu_seen = true;
      EXPECT_EQ(plugin.at("status"), "loaded");
      EXPECT_EQ(plugin.at("abi"), std::to_string(KESTREL_PLUGIN_ABI_MAJOR) + "." + std::to_string(KESTREL_PLUGIN_ABI_MINOR));
      const auto& device = plugin.at("devices").at(0);
      EXPECT_EQ(device.at("kind"), "cpu");
      EXPECT_NE(device.at("runtime").get<std::string>().find("Kokkos"), std::string::npos);
      EXPECT_GT(device.at("memory_total").get<uint64_t>(), 0u);
    } else if (plugin.at("path").get<std::string>().find(fault_dir) == 0) {
      // The deliberately broken plugins; real backends (cuda without a GPU, vulkan) may appear too.
      EXPECT_EQ(plugin.at("status"), "skipped") << plugin.dump();
      EXPECT_FALSE(plugin.at("reason").get<std::string>().empty()) << plugin.dump();
      ++skipped;
    }
  }
  EXPECT_TRUE(cpu_seen) << r.output;
  EXPECT_EQ(skipped, 11) << r.output;  // every library in tests/plugins (fault_plugins)
}

TEST(CliDevices, TableAndCheck) {
  CliRun r = run("devices --check");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cpu:0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" ok"), std::string::npos) << r.output;
}

TEST(CliConformance, RunsOneFamilyOnTheCpuBackend) {
  CliRun r = run("conformance --backend cpu --family gemm");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
}

// A fused family the plugin does not offer (the CPU plugin runs recurrent layers step by step) is not a
// failure when asked for alone: every case is optional and declined.
TEST(CliConformance, AFamilyThePluginDoesNotOfferIsNotAFailure) {
  CliRun r = run("conformance --backend cpu --family recurrent_layer");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("NOT OFFERED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the engine composes them"), std::string::npos) << r.output;
}

TEST(CliConformance, UnknownBackendAndEmptyFilterFail) {
  CliRun unknown = run("conformance --backend widget", fault_path);
  EXPECT_NE(unknown.status, 0);
  EXPECT_NE(unknown.output.find("no Widget accelerator found"), std::string::npos) << unknown.output;
  CliRun empty = run("conformance --backend cpu --filter no-such-case");
  EXPECT_EQ(empty.status, 1) << empty.output;
  EXPECT_NE(empty.output.find("no case ran"), std::string::npos) << empty.output;
}

TEST(CliOps, MatrixShowsSupportAndConformance) {
  CliRun r = run("ops --backend cpu");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("| gemm | yes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| fused adam_update | fused 4 | composed"), std::string::npos) << r.output;
}

// --markdown naming a folder is an error naming it (it used to exit 0 having written nothing), before the
// conformance run; so is an unknown backend, which used to overwrite the file with an empty matrix.
TEST(CliOps, MarkdownIntoAFolderOrForAnUnknownBackendIsAnError) {
  const std::string folder = std::filesystem::temp_directory_path().string();
  CliRun r = run("ops --backend cpu --markdown " + folder);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(folder + ": a folder"), std::string::npos) << r.output;
  const std::string file = folder + "/kestrel_ops_kept.md";
  kestrel::io::write_file_atomically(file, "kept\n");
  r = run("ops --backend no-such-backend --markdown " + file);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no 'no-such-backend' backend plugin"), std::string::npos) << r.output;
  EXPECT_EQ(kestrel::io::read_file(file), "kept\n");
}

}  // namespace
