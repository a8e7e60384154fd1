// Drawing runs' curves as SVG (kestrel/plot.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../io/json_text.h"
#include "kestrel/error.h"
#include "kestrel/io.h"
#include "kestrel/plot.h"
#include "run_log.h"

namespace kestrel {

namespace {

constexpr int kPanelWidth = 420, kPanelHeight = 300, kLeft = 58, kRight = 16, kTop = 34, kBottom = 46;
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};

const char* colour(size_t run) { return kColours[run % (sizeof kColours / sizeof kColours[0])]; }

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '\'') out += "&apos;";
    else out += c;
  }
  return out;
}

// Round tick values (1, 2 or 5 times a power of ten) covering [low, high], about `count` of them.
std::vector<double> ticks(double low, double high, int count) {
  const double raw = (high - low) / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) {
      step = m * power;
      break;
    }
  std::vector<double> out;
  if (!std::isfinite(step) || !(step > 0)) return out;  // an empty or degenerate range: no ticks
  // Counted, not accumulated: t += step stops advancing where step is below t's precision.
  for (double k = std::ceil(low / step); k * step <= high + step * 1e-9 && out.size() <= size_t(4 * count); ++k)
    out.push_back(std::abs(k) < 0.5 ? 0 : k * step);
  return out;
}

struct Series {
  std::vector<std::pair<double, double>> points;
  const char* colour;
  double opacity = 1, width = 1.8;
  bool markers = false;
};

// One panel at x offset `x0`: axes, grid, ticks, labels, then the series.
std::string panel(int x0, const std::string& title, const std::string& x_label, const std::string& y_label,
                  const std::vector<Series>& series, bool integer_x) {
  double x_low = 1e300, x_high = -1e300, y_low = 1e300, y_high = -1e300;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x_low = std::min(x_low, x), x_high = std::max(x_high, x), y_low = std::min(y_low, y), y_high = std::max(y_high, y);
    }
  std::string svg = fmt::format("<text x='{}' y='20' font-size='14' font-weight='bold'>{}</text>\n", x0 + kLeft,
                                escaped(title));
  const int plot_w = kPanelWidth - kLeft - kRight, plot_h = kPanelHeight - kTop - kBottom;
  svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n", x0 + kLeft, kTop,
                     plot_w, plot_h);
  if (x_low > x_high) {
    svg += fmt::format("<text x='{}' y='{}' font-size='12' fill='#888'>no data yet</text>\n", x0 + kLeft + 20,
                       kTop + plot_h / 2);
    return svg;
  }
  if (integer_x) x_low = std::min(x_low, 1.0);
  if (x_high == x_low) x_high = x_low + 1;
  // A flat curve (one point, or values a rounding apart) gets a band around it rather than a range of
  // nothing, which no tick spacing divides.
  const double span = y_high - y_low, scale = std::max(std::abs(y_high), std::abs(y_low));
  const double pad = span > scale * 1e-6 ? span * 0.06 : std::max(scale * 0.05, 1e-3);
  y_low -= pad, y_high += pad;
  auto px = [&](double x) { return x0 + kLeft + (x - x_low) / (x_high - x_low) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - (y - y_low) / (y_high - y_low) * plot_h; };
  for (double t : ticks(y_low, y_high, 5)) {
    svg += fmt::format("<line x1='{:.1f}' x2='{:.1f}' y1='{:.1f}' y2='{:.1f}' stroke='#e4e4e4'/>\n", px(x_low), px(x_high),
                       py(t), py(t));
    svg += fmt::format("<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>{:g}</text>\n", x0 + kLeft - 4,
                       py(t) + 3, t);
  }
  std::vector<double> x_ticks = ticks(x_low, x_high, 5);
  if (integer_x) x_ticks.erase(std::remove_if(x_ticks.begin(), x_ticks.end(), [](double t) { return t != std::floor(t); }),
                               x_ticks.end());
  for (double t : x_ticks) {
    svg += fmt::format("<line x1='{:.1f}' x2='{:.1f}' y1='{}' y2='{}' stroke='#888'/>\n", px(t), px(t), kTop + plot_h,
                       kTop + plot_h + 4);
    svg += fmt::format("<text x='{:.1f}' y='{}' font-size='10' text-anchor='middle'>{:g}</text>\n", px(t),
                       kTop + plot_h + 15, t);
  }
  svg += fmt::format("<text x='{}' y='{}' font-size='11' text-anchor='middle'>{}</text>\n", x0 + kLeft + plot_w / 2,
                     kPanelHeight - 12, escaped(x_label));
  svg += fmt::format("<text x='{}' y='{}' font-size='11' text-anchor='middle' transform='rotate(-90 {} {})'>{}</text>\n",
                     x0 + 14, kTop + plot_h / 2, x0 + 14, kTop + plot_h / 2, escaped(y_label));
  for (const Series& s : series) {
    std::string points;
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-opacity='{}' stroke-width='{}' points='{}'/>\n",
                       s.colour, s.opacity, s.width, points);
    const auto finite = std::count_if(s.points.begin(), s.points.end(), [](auto p) { return std::isfinite(p.second); });
    if (s.markers || finite == 1)  // a line through one point draws nothing
      for (auto [x, y] : s.points)
        if (std::isfinite(y)) svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='2.5' fill='{}'/>\n", px(x), py(y), s.colour);
  }
  return svg;
}

// An exponential moving average, debiased at the start (as TensorBoard's smoothing).
std::vector<std::pair<double, double>> smoothed(const std::vector<std::pair<double, double>>& raw, double weight) {
  std::vector<std::pair<double, double>> out;
  double average = 0, correction = 0;
  for (auto [x, y] : raw) {
    if (!std::isfinite(y)) continue;
    average = weight * average + (1 - weight) * y;
    correction = weight * correction + (1 - weight);
    out.push_back({x, average / correction});
  }
  return out;
}

}  // namespace

RunCurves run_curves(std::string name, std::string subtitle, const std::vector<MetricRecord>& records) {
  RunCurves run{std::move(name), std::move(subtitle), {}, {}};
  for (const MetricRecord& r : records) {
    if (r.kind == "eval")
      run.evals.push_back({r.step, r.epoch + 1, r.loss, r.accuracy});
    else if (r.kind == "train")
      run.train_loss.push_back({r.step, r.loss});
  }
  return run;
}

std::string run_subtitle(const std::string& model, const std::string& device, const std::string& device_name,
                         int64_t steps, double test_loss, double test_accuracy) {
  const std::string loss = std::isnan(test_loss) ? "not evaluated" : fmt::format("test loss {:.4f}", test_loss);
  const std::string accuracy = std::isnan(test_accuracy) ? "" : fmt::format(", test accuracy {:.2f}%", test_accuracy * 100);
  return fmt::format("{} on {} ({}): {} steps, {}{}", model, device, device_name, steps, loss, accuracy);
}

RunCurves read_run_curves(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const std::string metrics = run_dir + "/metrics.jsonl";
  if (!fs::is_regular_file(metrics))
    throw InvalidArgument(fmt::format("{}: no metrics.jsonl here; give the output folder of a training run", run_dir));
  std::string name = fs::path(run_dir).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = fs::absolute(run_dir).lexically_normal().parent_path().filename().string();
  std::vector<MetricRecord> records;
  std::istringstream lines(io::read_file(metrics));
  for (std::string line; std::getline(lines, line);)
    if (std::optional<MetricRecord> r = parse_metric_line(line, metrics)) records.push_back(*r);
  std::string subtitle;
  const std::string summary_path = run_dir + "/summary.json";
  if (fs::is_regular_file(summary_path)) {
    nlohmann::json s = nlohmann::json::parse(io::read_file(summary_path), nullptr, false);
    // A summary edited by hand or cut short only loses its subtitle: fields of another type are left out.
    auto number = [&](const char* key) { return s.contains(key) && s[key].is_number() ? s[key].get<double>() : NAN; };
    auto text = [&](const char* key) { return s.contains(key) && s[key].is_string() ? s[key].get<std::string>() : "?"; };
    if (s.is_object())
      subtitle = run_subtitle(text("model"), text("device"), text("device_name"), io::count_or_zero(s, "steps"),
                              number("test_loss"), number("test_accuracy"));
  }
  return run_curves(std::move(name), std::move(subtitle), records);
}

std::string plot_svg(const std::vector<RunCurves>& runs) {
  std::vector<Series> train, test_loss, test_accuracy;
  bool any_accuracy = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::pair<double, double>> raw, loss, accuracy;
    for (auto [step, value] : runs[i].train_loss) raw.push_back({double(step), value});
    for (const RunCurves::Eval& e : runs[i].evals) {
      loss.push_back({double(e.epoch), e.loss});
      if (!std::isnan(e.accuracy)) accuracy.push_back({double(e.epoch), e.accuracy * 100});
    }
    any_accuracy = any_accuracy || !accuracy.empty();
    train.push_back({raw, colour(i), 0.25, 1.0});
    train.push_back({smoothed(raw, 0.6), colour(i), 1.0, 2.0});  // TensorBoard's default weight
    test_loss.push_back({loss, colour(i), 1.0, 2.0, true});
    test_accuracy.push_back({accuracy, colour(i), 1.0, 2.0, true});
  }
  const int header = 22 * int(runs.size()) + 8;
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\n",
                                3 * kPanelWidth, kPanelHeight + header);
  svg += "<rect width='100%' height='100%' fill='white'/>\n";
  svg += fmt::format("<g transform='translate(0 {})'>\n", header);
  svg += panel(0, "training loss (raw faint, smoothed bold)", "optimizer step", "loss", train, false);
  svg += panel(kPanelWidth, "test loss", "epoch", "loss", test_loss, true);
  svg += panel(2 * kPanelWidth, any_accuracy ? "test accuracy" : "test accuracy (none: regression)", "epoch",
               "accuracy (%)", test_accuracy, true);
  svg += "</g>\n";
  // The legend: each run's colour, name and what it was.
  for (size_t i = 0; i < runs.size(); ++i) {
    const int y = 18 + 22 * int(i);
    svg += fmt::format("<rect x='{}' y='{}' width='14' height='4' fill='{}'/>\n", kLeft, y - 5, colour(i));
    svg += fmt::format("<text x='{}' y='{}' font-size='13'><tspan font-weight='bold'>{}</tspan>  {}</text>\n", kLeft + 22,
                       y, escaped(runs[i].name), escaped(runs[i].subtitle));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kestrel
