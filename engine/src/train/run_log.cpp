#include "run_log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "../io/json_text.h"
#include "kestrel/io.h"

namespace kestrel {

namespace {

nlohmann::json to_json(const MetricRecord& r) {
  nlohmann::json j{{"kind", r.kind}, {"epoch", r.epoch}, {"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}};
  if (!std::isnan(r.accuracy)) j["accuracy"] = r.accuracy;
  if (r.kind == "train") {
    j["lr"] = r.lr;
    j["samples_per_second"] = r.samples_per_second;
  }
  return j;
}

// A number, or NaN for null (how JSON writes a non-finite loss) and absent fields.
double number_or_nan(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? NAN : it->get<double>();
}

MetricRecord from_json(const nlohmann::json& j) {
  MetricRecord r;
  r.kind = j.value("kind", "");
  r.epoch = j.value("epoch", int64_t{0});
  r.step = j.value("step", int64_t{0});
  r.loss = number_or_nan(j, "loss");
  r.accuracy = number_or_nan(j, "accuracy");
  r.lr = j.value("lr", 0.0);
  r.samples_per_second = j.value("samples_per_second", 0.0);
  r.seconds = j.value("seconds", 0.0);
  return r;
}

std::string duration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

RunLog::RunLog(std::string out_dir, int64_t resume_step, bool quiet, int progress)
    : out_dir_(std::move(out_dir)), quiet_(quiet), bar_(progress < 0 ? isatty(fileno(stdout)) != 0 : progress == 1) {
  if (out_dir_.empty()) return;  // a data-parallel rank other than 0: rank 0 writes the run's files
  std::filesystem::create_directories(out_dir_);
  std::string path = out_dir_ + "/metrics.jsonl";
  // The lines kept are kept verbatim: re-encoding them could change how their numbers are written.
  std::string kept;
  if (resume_step >= 0 && std::filesystem::is_regular_file(path)) {
    std::istringstream in(io::read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      try {
        MetricRecord r = from_json(io::parse_json(line, path));
        if (r.step > resume_step) continue;
        records_.push_back(r);
        kept += line + "\n";
      } catch (const std::exception&) {
        // a line cut short by the interruption (or not ours): dropped
      }
    }
  }
  io::write_file_atomically(path, kept);
  events_ = std::make_unique<TensorBoardEvents>(out_dir_, resume_step);
}

void RunLog::config_text(const std::string& text) {
  if (events_) events_->text("run_config", 0, "```\n" + text + "\n```");
}

void RunLog::record(const MetricRecord& record) {
  reported_ = true;
  records_.push_back(record);
  if (out_dir_.empty()) return;
  // TensorBoard's tags: train/... every log_every steps, eval/... every epoch, all at the optimizer step.
  const std::string prefix = record.kind + "/";
  events_->scalar(prefix + "loss", record.step, record.loss);
  if (!std::isnan(record.accuracy)) events_->scalar(prefix + "accuracy", record.step, record.accuracy);
  if (record.kind == "train") {
    events_->scalar("train/learning_rate", record.step, record.lr);
    events_->scalar("train/samples_per_second", record.step, record.samples_per_second);
  }
  std::ofstream out(out_dir_ + "/metrics.jsonl", std::ios::app);
  out << to_json(record).dump() << "\n";
}

void RunLog::progress(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss, double accuracy,
                      double samples_per_second, double eta_seconds) {
  if (quiet_) return;
  std::string acc = std::isnan(accuracy) ? "" : fmt::format(" acc {:5.1f}%", accuracy * 100);
  // NaN before the first report; after one, a non-finite loss is shown as such.
  std::string shown_loss = std::isfinite(loss) ? fmt::format("{:.4f}", loss) : std::isinf(loss) ? fmt::format("{}", loss)
                           : reported_ ? "nan" : "  -   ";
  if (bar_) {
    const int width = 24;
    int filled = batches ? static_cast<int>(double(batch) / batches * width) : width;
    std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    fmt::print("\repoch {}/{} [{}] {}/{} loss {}{} {:.0f} samples/s ETA {}   ", epoch + 1, epochs, bar, batch, batches,
               shown_loss, acc, samples_per_second, duration(eta_seconds));
    std::fflush(stdout);
    bar_open_ = true;
  } else {
    fmt::print("epoch {}/{} batch {}/{} loss {}{} {:.0f} samples/s ETA {}\n", epoch + 1, epochs, batch, batches,
               shown_loss, acc, samples_per_second, duration(eta_seconds));
    std::fflush(stdout);
  }
}

void RunLog::message(const std::string& text) {
  if (quiet_) return;
  if (bar_open_) {
    fmt::print("\n");
    bar_open_ = false;
  }
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

void RunLog::write_plot() const {
  if (out_dir_.empty()) return;
  // Two panels over epochs: loss (train and test) and test accuracy.
  std::vector<std::pair<double, double>> train_loss, test_loss, test_acc;
  for (const auto& r : records_) {
    if (r.kind == "eval") {
      if (std::isfinite(r.loss)) test_loss.push_back({double(r.epoch), r.loss});
      if (!std::isnan(r.accuracy)) test_acc.push_back({double(r.epoch), r.accuracy * 100});
    } else if (std::isfinite(r.loss)) {
      train_loss.push_back({double(r.epoch), r.loss});
    }
  }
  const int width = 420, height = 260, margin = 44;
  auto panel = [&](int x0, const std::string& title, std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> series) {
    double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
    for (auto& [name, points] : series)
      for (auto [x, y] : points) {
        xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
    if (xmin > xmax) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + 1;
    auto px = [&](double x) { return x0 + margin + (x - xmin) / (xmax - xmin) * (width - 2 * margin); };
    auto py = [&](double y) { return height - margin - (y - ymin) / (ymax - ymin) * (height - 2 * margin); };
    std::string svg = fmt::format("<text x='{}' y='20' font-size='14'>{}</text>\n", x0 + margin, title);
    svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#999'/>\n", x0 + margin, margin,
                       width - 2 * margin, height - 2 * margin);
    svg += fmt::format("<text x='{}' y='{}' font-size='10'>{:.3g}</text><text x='{}' y='{}' font-size='10'>{:.3g}</text>\n",
                       x0 + 2, py(ymax) + 4, ymax, x0 + 2, py(ymin), ymin);
    svg += fmt::format("<text x='{}' y='{}' font-size='10'>epoch {:.3g}</text><text x='{}' y='{}' font-size='10'>{:.3g}</text>\n",
                       px(xmin) - 10, height - margin + 14, xmin, px(xmax) - 8, height - margin + 14, xmax);
    const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c"};
    int k = 0;
    for (auto& [name, points] : series) {
      std::string path;
      for (auto [x, y] : points) path += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>\n", colours[k], path);
      svg += fmt::format("<text x='{}' y='{}' font-size='11' fill='{}'>{}</text>\n", x0 + width - margin - 70,
                         margin + 14 + 14 * k, colours[k], name);
      ++k;
    }
    return svg;
  };
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\n",
                                2 * width, height);
  svg += "<rect width='100%' height='100%' fill='white'/>\n";
  svg += panel(0, "loss", {{"train", train_loss}, {"test", test_loss}});
  svg += panel(width, "test accuracy (%)", {{"test", test_acc}});
  svg += "</svg>\n";
  io::write_file_atomically(out_dir_ + "/plot.svg", svg);
}

}  // namespace kestrel
