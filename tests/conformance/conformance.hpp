// The plugin conformance suite: written once, run against every loaded plugin and device. Each case
// runs one op with one dtype, shape and layout through the engine and compares the result with a
// plain double-precision reference computed on the host.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kestrel/engine.h"

namespace kestrel::conformance {

struct CaseResult {
  std::string name;     // "unary/exp/f32/(7, 13)/strided"
  std::string outcome;  // "passed", "failed", "unsupported"
  std::string detail;   // for failures: what differed
};

struct Summary {
  std::string device;
  int run = 0;  // cases that ran (passed + failed)
  int passed = 0;
  int failed = 0;
  int unsupported = 0;  // optional op/dtype combinations the plugin declined
  std::vector<CaseResult> failures;
};

// The op families, in the order they run: "fill", "copy", "unary", ...
const std::vector<std::string>& families();

// Runs the cases of `family` (all families when empty) whose names contain `filter`.
Summary run(const Device& device, const std::string& family = "", const std::string& filter = "",
            const std::function<void(const CaseResult&)>& on_case = {});

}  // namespace kestrel::conformance
