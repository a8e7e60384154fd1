// Numeric CSV files with a header row: one sample per line, the target column(s) split off.
// Numbers are parsed with std::from_chars, which ignores the C locale (strtod would read "0,5" in
// some locales and reject "0.5"), so a file reads the same everywhere.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <string_view>

#include "kestrel/data.h"
#include "kestrel/error.h"
#include "kestrel/io.h"

namespace kestrel::data {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    cells.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return cells;
    start = comma + 1;
  }
}

bool is_blank(std::string_view line) { return trim(line).empty() && line.find(',') == std::string_view::npos; }

// Which columns hold what, after negative indices are resolved.
struct Columns {
  std::vector<std::string> names;
  size_t first_target = 0, target_count = 1;
  bool is_target(size_t c) const { return c >= first_target && c < first_target + target_count; }
};

Columns resolve_columns(const std::string& path, std::string_view header, const CsvOptions& options) {
  Columns columns;
  for (std::string_view name : split_cells(header)) columns.names.emplace_back(name);
  const auto n = static_cast<int64_t>(columns.names.size());
  if (options.target_columns < 1)
    throw InvalidArgument(fmt::format("CSV file '{}': target_columns is {}; it must be at least 1", path,
                                      options.target_columns));
  if (options.classification && options.target_columns != 1)
    throw InvalidArgument(fmt::format("CSV file '{}': a classification set has one label column, not "
                                      "target_columns = {}; set classification = false for regression",
                                      path, options.target_columns));
  const int64_t last = options.target_column < 0 ? n + options.target_column : options.target_column;
  const int64_t first = last - options.target_columns + 1;
  if (last < 0 || last >= n || first < 0)
    throw InvalidArgument(fmt::format(
        "CSV file '{}': target_column {} with target_columns {} does not fit the {} columns of the header",
        path, options.target_column, options.target_columns, n));
  if (n - options.target_columns < 1)
    throw InvalidArgument(fmt::format("CSV file '{}': every one of its {} columns is a target; "
                                      "at least one feature column is needed", path, n));
  columns.first_target = static_cast<size_t>(first);
  columns.target_count = static_cast<size_t>(options.target_columns);
  return columns;
}

struct CellParser {
  const std::string& path;
  const Columns& columns;
  int64_t line_number = 0;

  std::string where(size_t column) const {
    return fmt::format("CSV file '{}' line {}, column {} ('{}')", path, line_number, column + 1,
                       columns.names[column]);
  }

  double number(std::string_view cell, size_t column) const {
    std::string_view digits = cell;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);  // from_chars rejects '+'
    double value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size())
      throw InvalidArgument(fmt::format("{}: '{}' is not a number; only numeric columns are supported",
                                        where(column), cell));
    if (!std::isfinite(value))
      throw InvalidArgument(fmt::format("{}: '{}' is not a finite number", where(column), cell));
    // Checked in the precision it is used in: samples are f32, where this would become infinite.
    if (std::abs(value) > std::numeric_limits<float>::max())
      throw InvalidArgument(fmt::format("{}: '{}' is beyond the f32 range (about 3.4e38) that samples are stored in",
                                        where(column), cell));
    return value;
  }

  int64_t label(std::string_view cell, size_t column) const {
    const double value = number(cell, column);
    if (value < 0 || value != std::floor(value) || value > 2147483647.0)
      throw InvalidArgument(fmt::format("{}: label '{}' is not a class index (an integer 0, 1, ...); "
                                        "set classification = false for a regression target",
                                        where(column), cell));
    return static_cast<int64_t>(value);
  }
};

}  // namespace

Dataset load_csv(const std::string& path, const CsvOptions& options) {
  io::check_regular_file(path, "CSV file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(fmt::format("CSV file '{}' not found or not readable", path));

  std::string line;
  if (!std::getline(in, line) || is_blank(line))
    throw InvalidArgument(fmt::format("CSV file '{}' line 1: expected a header row naming the columns", path));
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte order mark
  const Columns columns = resolve_columns(path, line, options);

  Dataset dataset;
  dataset.name = path;
  const size_t n = columns.names.size();
  dataset.sample_shape = {static_cast<int64_t>(n - columns.target_count)};
  if (!options.classification) dataset.target_shape = {static_cast<int64_t>(columns.target_count)};

  CellParser parser{path, columns, 1};
  int64_t max_label = -1;
  while (std::getline(in, line)) {
    ++parser.line_number;
    if (is_blank(line)) continue;
    const std::vector<std::string_view> cells = split_cells(line);
    if (cells.size() != n)
      throw InvalidArgument(fmt::format("CSV file '{}' line {}: {} columns where the header has {}", path,
                                        parser.line_number, cells.size(), n));
    for (size_t c = 0; c < n; ++c) {
      if (!columns.is_target(c)) {
        dataset.features.push_back(static_cast<float>(parser.number(cells[c], c)));
      } else if (options.classification) {
        dataset.labels.push_back(parser.label(cells[c], c));
        max_label = std::max(max_label, dataset.labels.back());
      } else {
        dataset.targets.push_back(static_cast<float>(parser.number(cells[c], c)));
      }
    }
    ++dataset.size;
  }
  if (dataset.size == 0) throw InvalidArgument(fmt::format("CSV file '{}' has a header but no data rows", path));
  if (options.classification) dataset.num_classes = max_label + 1;
  return dataset;
}

}  // namespace kestrel::data
