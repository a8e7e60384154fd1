#include "numeric_flags.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace kestrel::cli {

CLI::Option* add_integer_flag(CLI::App* cmd, const std::string& name, std::optional<int64_t>& target,
                              const std::string& help, int64_t min, int64_t max) {
  const std::string range = max == INT64_MAX ? fmt::format("an integer >= {}", min)
                                             : fmt::format("an integer from {} to {}", min, max);
  auto parse = [&target, name, min, max, range](const std::string& text) {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min || value > max)
      throw CLI::ValidationError(name, fmt::format("expected {}, got '{}'", range, text));
    target = value;
  };
  return cmd->add_option_function<std::string>(name, parse, help)->type_name("INT");
}

CLI::Option* add_number_flag(CLI::App* cmd, const std::string& name, std::optional<double>& target,
                             const std::string& help, double min, double max) {
  auto parse = [&target, name, min, max](const std::string& text) {
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
        value < min || value > max)
      throw CLI::ValidationError(name, fmt::format("expected a finite number in [{}, {}], got '{}'", min, max, text));
    target = value;
  };
  return cmd->add_option_function<std::string>(name, parse, help)->type_name("FLOAT");
}

}  // namespace kestrel::cli
