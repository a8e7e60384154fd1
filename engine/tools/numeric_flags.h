// Numeric flags read exactly. CLI11 2.1 clamps an out-of-range integer to its type's limit
// (--seed 2^64 became 2^63 - 1), reads a leading 0 as octal and lets NaN through its range checks;
// these refuse all of that, naming the flag and the range.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace kestrel::cli {

// An integer in [min, max] in decimal, stored in `target` when given.
CLI::Option* add_integer_flag(CLI::App* cmd, const std::string& name, std::optional<int64_t>& target,
                              const std::string& help, int64_t min, int64_t max = INT64_MAX);
// A finite number in [min, max].
CLI::Option* add_number_flag(CLI::App* cmd, const std::string& name, std::optional<double>& target,
                             const std::string& help, double min, double max);

}  // namespace kestrel::cli
