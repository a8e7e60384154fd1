// GoogleTest driver for the conformance suite: one test per (plugin device, op family), registered at
// run time for every plugin the engine loaded. Restrict with --gtest_filter='Conformance/cpu_0.*'.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>

#include "conformance.hpp"
#include "kestrel/engine.h"

namespace {

using kestrel::conformance::Summary;

std::map<std::string, Summary>& totals() {
  static std::map<std::string, Summary> all;
  return all;
}

void add(Summary& into, const Summary& part) {
  into.device = part.device;
  into.run += part.run;
  into.passed += part.passed;
  into.failed += part.failed;
  into.unsupported += part.unsupported;
}

class FamilyTest : public ::testing::Test {
 public:
  FamilyTest(kestrel::Device device, std::string family) : device_(std::move(device)), family_(std::move(family)) {}
  void TestBody() override {
    Summary summary = kestrel::conformance::run(device_, family_);
    add(totals()[device_.str()], summary);
    RecordProperty("cases_run", summary.run);
    for (size_t i = 0; i < summary.failures.size() && i < 25; ++i)
      ADD_FAILURE() << summary.failures[i].name << ": " << summary.failures[i].detail;
    EXPECT_EQ(summary.failed, 0) << summary.failed << " of " << summary.run << " " << family_ << " cases failed on "
                                 << device_.str();
  }

 private:
  kestrel::Device device_;
  std::string family_;
};

// Runs after every family of a device: a plugin for which no case ran has not been tested at all.
class CountTest : public ::testing::Test {
 public:
  explicit CountTest(std::string device) : device_(std::move(device)) {}
  void TestBody() override {
    const Summary& total = totals()[device_];
    fmt::print("[ conformance ] {}: {} cases run, {} passed, {} failed, {} optional combinations unsupported\n",
               device_, total.run, total.passed, total.failed, total.unsupported);
    EXPECT_GT(total.run, 0) << "no conformance case ran on " << device_;
  }

 private:
  std::string device_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kestrel::Engine& engine = kestrel::Engine::global();
  int devices = 0;
  for (const auto& plugin : engine.plugins()) {
    if (!plugin.loaded) continue;
    for (const auto& info : plugin.devices) {
      kestrel::Device device = engine.device(fmt::format("{}:{}", plugin.name, info.index));
      std::string suite = fmt::format("Conformance/{}_{}", plugin.name, info.index);
      for (const std::string& family : kestrel::conformance::families())
        ::testing::RegisterTest(suite.c_str(), family.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                [=]() -> ::testing::Test* { return new FamilyTest(device, family); });
      std::string name = device.str();
      ::testing::RegisterTest(suite.c_str(), "zz_cases_counted", nullptr, nullptr, __FILE__, __LINE__,
                              [=]() -> ::testing::Test* { return new CountTest(name); });
      ++devices;
    }
  }
  if (devices == 0) {
    fmt::print(stderr, "no plugin loaded: run `kestrel devices` to see why\n");
    return 1;
  }
  // KESTREL_EXPECT_DEVICES=cpu,vulkan (scripts/test.sh sets it): each plugin named must offer a device
  // here, or the run fails instead of passing with that backend untested (a filter such as
  // *vulkan*collective* matches nothing then).
  if (const char* expected = std::getenv("KESTREL_EXPECT_DEVICES")) {
    std::istringstream names(expected);
    for (std::string name; std::getline(names, name, ',');) {
      bool found = false;
      for (const auto& plugin : engine.plugins())
        found = found || (plugin.loaded && plugin.name == name && !plugin.devices.empty());
      if (!found && !name.empty()) {
        fmt::print(stderr,
                   "KESTREL_EXPECT_DEVICES names {}, but no loaded plugin of that name has a device here: run "
                   "`kestrel devices` to see why\n",
                   name);
        return 1;
      }
    }
  }
  return RUN_ALL_TESTS();
}
