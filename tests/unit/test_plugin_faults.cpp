// Every way a plugin can fail to load is skipped with a one-line reason; the engine keeps working with
// the others; asking for a skipped backend explicitly is an error carrying that reason.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "kestrel/engine.h"
#include "kestrel/error.h"
#include "kestrel/ops.h"

namespace {

// Only these plugin files and folders: neither KESTREL_PLUGIN_PATH nor the default locations.
kestrel::EngineOptions only(std::vector<std::string> paths) {
  kestrel::EngineOptions options;
  options.plugin_path = std::move(paths);
  options.use_environment = false;
  options.use_default_locations = false;
  return options;
}

kestrel::EngineOptions fault_options() {
  kestrel::EngineOptions options;
  options.plugin_path = {KESTREL_FAULT_PLUGIN_DIR, "/nonexistent/libkestrel_ghost.so"};
  options.use_environment = false;
  return options;
}

const kestrel::PluginInfo* find(const kestrel::Engine& engine, const std::string& name) {
  for (const auto& plugin : engine.plugins())
    if (plugin.name == name) return &plugin;
  return nullptr;
}

void expect_skipped(const kestrel::Engine& engine, const std::string& name, const std::string& reason_part) {
  const kestrel::PluginInfo* plugin = find(engine, name);
  ASSERT_NE(plugin, nullptr) << "no plugin entry named " << name;
  EXPECT_FALSE(plugin->loaded) << name;
  EXPECT_NE(plugin->reason.find(reason_part), std::string::npos) << name << ": " << plugin->reason;
}

TEST(PluginFaults, EachBrokenPluginIsSkippedWithItsReason) {
  kestrel::Engine engine(fault_options());
  expect_skipped(engine, "abi_mismatch", "built for plugin ABI 999.0");
  expect_skipped(engine, "widget", "no Widget accelerator found");
  expect_skipped(engine, "init_fails", "initialisation failed: driver handshake failed");
  expect_skipped(engine, "probe_throws", "probe failed: it threw probe exploded (deliberately)");
  expect_skipped(engine, "incomplete", "lacks required entries: supports_op, launch");
  expect_skipped(engine, "old_minor", "built for plugin ABI 1.1");
  expect_skipped(engine, "short_table", "lacks required entries: supports_op, launch");
  expect_skipped(engine, "countless_devices", "reports 2147483647 devices");
  expect_skipped(engine, "libkestrel_no_entry.so", "no entry symbol 'kestrel_plugin_v1'");
  expect_skipped(engine, "libkestrel_missing_dependency.so", "libkestrel_vanishing_dependency.so");
  expect_skipped(engine, "libkestrel_not_elf.so", "cannot load the library");
  expect_skipped(engine, "libkestrel_ghost.so", "not found");
}

// A device kept by a static object outlives main. The exit_teardown plugin's driver, like NVIDIA's, tears
// itself down in an exit handler registered when the context was created, and the plugin ends the process
// with status 70 when it is called after that: the engine must have released the device before.
TEST(PluginFaults, ADeviceKeptPastMainIsReleasedBeforeTheDriverExits) {
  EXPECT_EXIT(
      {
        static std::vector<kestrel::Device> kept;  // constructed first, so destroyed after all below
        static kestrel::Engine engine([] {
          kestrel::EngineOptions options;
          options.plugin_path = {KESTREL_EXIT_TEARDOWN_PLUGIN_DIR};
          options.use_environment = false;
          return options;
        }());
        kept.push_back(engine.device("exit_teardown:0"));
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

// A process forked after the CPU plugin's threads have run (Python's multiprocessing, a death test) has
// none of those threads: libgomp would wait for them at the child's first parallel loop, and Kokkos's
// OpenMP backend in its finalisation at exit. The child computes on one thread and exits.
TEST(PluginFaults, AChildForkedAfterTheCpuThreadsRanComputesAndExits) {
  kestrel::Engine engine;
  const kestrel::Device cpu = engine.device("cpu:0");
  const auto product_sum = [&cpu] {  // a threaded fill, product and sum (well over the threads' grain)
    auto a = kestrel::Tensor::full({512, 512}, 0.5, kestrel::DType::f32, cpu);
    auto b = kestrel::ops::binary(KESTREL_BINARY_ADD, a, a);  // ones
    return kestrel::ops::reduce(KESTREL_REDUCE_SUM, kestrel::ops::matmul(a, b)).to_vector<float>()[0];
  };
  ASSERT_EQ(product_sum(), 0.5f * 512 * 512 * 512);
  EXPECT_EXIT(
      {
        std::exit(product_sum() == 0.5f * 512 * 512 * 512 ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// A FIFO named like a plugin is skipped without being opened (opening it would wait for a writer).
TEST(PluginFaults, AFifoNamedLikeAPluginIsSkipped) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kestrel_fifo_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path fifo = dir / "libkestrel_fifo.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  kestrel::Engine engine(only({dir.string()}));
  expect_skipped(engine, "libkestrel_fifo.so", "not a regular file");
  fs::remove_all(dir);
}

TEST(PluginFaults, TheEngineKeepsWorkingWithTheOtherPlugins) {
  kestrel::Engine engine(fault_options());
  const kestrel::PluginInfo* cpu = find(engine, "cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(cpu->loaded) << cpu->reason;
  // The best device comes from the highest-priority plugin that loaded (cpu here, cuda on a GPU
  // machine), never from one of the broken ones.
  const kestrel::PluginInfo* best = nullptr;
  for (const auto& plugin : engine.plugins())
    if (plugin.loaded && !plugin.devices.empty() && (!best || plugin.priority > best->priority)) best = &plugin;
  ASSERT_NE(best, nullptr);
  kestrel::Device device = engine.best_device();
  EXPECT_EQ(device.backend(), best->name);
  EXPECT_EQ(engine.best_device({"auto"}).backend(), best->name);
  auto x = kestrel::Tensor::from_vector<float>({1, -2, 3}, {3}, device);
  EXPECT_EQ(kestrel::ops::unary(KESTREL_UNARY_RELU, x).to_vector<float>(), (std::vector<float>{1, 0, 3}));
}

TEST(PluginFaults, AskingForASkippedBackendGivesItsReason) {
  kestrel::Engine engine(fault_options());
  try {
    engine.device("widget");
    FAIL() << "a skipped backend was handed out";
  } catch (const kestrel::BackendUnavailable& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("no Widget accelerator found"), std::string::npos) << message;
    EXPECT_NE(message.find("Available: "), std::string::npos) << message;
    EXPECT_NE(message.find("cpu", message.find("Available: ")), std::string::npos) << message;
  }
  EXPECT_THROW(engine.device("init_fails:0"), kestrel::BackendUnavailable);
  EXPECT_THROW(engine.device("nosuchbackend"), kestrel::BackendUnavailable);
  EXPECT_THROW(engine.device("cpu:7"), kestrel::BackendUnavailable);
  EXPECT_THROW(engine.device("cpu:x"), kestrel::InvalidArgument);
  // Falling back through a preference list skips what cannot run.
  EXPECT_EQ(engine.best_device({"widget", "cpu"}).backend(), "cpu");
}

TEST(PluginFaults, ASecondPluginWithTheSameNameIsShadowed) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "kestrel_shadow_test";
  fs::create_directories(dir);
  kestrel::Engine probe_engine;
  const kestrel::PluginInfo* cpu = find(probe_engine, "cpu");
  ASSERT_NE(cpu, nullptr);
  fs::copy_file(cpu->path, dir / "libkestrel_cpu_copy.so", fs::copy_options::overwrite_existing);
  kestrel::Engine engine(only({cpu->path, dir.string()}));
  ASSERT_EQ(engine.plugins().size(), 2u);
  EXPECT_TRUE(engine.plugins()[0].loaded);
  EXPECT_FALSE(engine.plugins()[1].loaded);
  EXPECT_NE(engine.plugins()[1].reason.find("shadowed"), std::string::npos) << engine.plugins()[1].reason;
  fs::remove_all(dir);
}

// A hard link is the same file under another name: one candidate, not a second instance of the library
// (dlopen would return the first, whose state the shadowed instance's shutdown would then tear down).
TEST(PluginFaults, AHardLinkToALoadedPluginIsNotLoadedAgain) {
  namespace fs = std::filesystem;
  kestrel::Engine probe_engine;
  const kestrel::PluginInfo* cpu = find(probe_engine, "cpu");
  ASSERT_NE(cpu, nullptr);
  // Beside the plugin: a hard link cannot cross file systems.
  const fs::path dir = fs::path(cpu->path).parent_path() / "kestrel_hardlink_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_hard_link(cpu->path, dir / "libkestrel_cpu_link.so");
  {
    kestrel::Engine engine(only({cpu->path, dir.string()}));
    ASSERT_EQ(engine.plugins().size(), 1u);
    EXPECT_TRUE(engine.plugins()[0].loaded);
    EXPECT_EQ(engine.device("cpu:0").backend(), "cpu");
  }
  fs::remove_all(dir);
}

TEST(PluginFaults, NoPluginsAtAllIsAClearError) {
  kestrel::Engine engine(only({}));
  EXPECT_TRUE(engine.plugins().empty());
  EXPECT_THROW(engine.best_device(), kestrel::BackendUnavailable);
}

}  // namespace
