#include <map>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {
using FamilyFn = void (*)(Runner&);
const std::vector<std::pair<std::string, FamilyFn>>& registry() {
  static const std::vector<std::pair<std::string, FamilyFn>> all = {
      {"fill", fill_cases},     {"copy", copy_cases},   {"unary", unary_cases},   {"binary", binary_cases},
      {"reduce", reduce_cases}, {"gemm", gemm_cases},   {"index", index_cases},   {"random", random_cases},
      {"window", window_cases}, {"fused", fused_cases},   {"attention", attention_cases},
      {"layer_norm", layer_norm_cases}, {"lstm_cell", lstm_cell_cases},
      {"gru_cell", gru_cell_cases}, {"conv", conv_cases}, {"recurrent_layer", recurrent_layer_cases}, {"capture", capture_cases},
      {"collective", collective_cases}};
  return all;
}
}  // namespace

const std::vector<std::string>& families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, fn] : registry()) out.push_back(name);
    return out;
  }();
  return names;
}

Summary run(const Device& device, const std::string& family, const std::string& filter,
            const std::function<void(const CaseResult&)>& on_case) {
  Summary summary;
  summary.device = device.str();
  for (const auto& [name, fn] : registry()) {
    if (!family.empty() && family != name) continue;
    Runner runner(device, name, filter, summary, on_case);
    fn(runner);
  }
  return summary;
}

}  // namespace kestrel::conformance
