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
#include "kestrel/plot.h"

namespace kestrel {

namespace {

nlohmann::json to_json(const MetricRecord& r) {
  nlohmann::json j{{"kind", r.kind}, {"epoch", r.epoch}, {"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}};
  if (!std::isnan(r.accuracy)) j["accuracy"] = r.accuracy;
  if (r.kind == "train") {
    j["lr"] = r.lr;
    j["samples_per_second"] = r.samples_per_second;
    if (r.loss_scale > 0) j["loss_scale"] = r.loss_scale;
    if (r.grad_norm) j["grad_norm"] = *r.grad_norm;  // null where it is not finite
  }
  return j;
}

// A number, or NaN for null (how JSON writes a non-finite loss) and absent fields.
double number_or_nan(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? NAN : it->get<double>();
}

MetricRecord record_from_json(const nlohmann::json& j) {
  MetricRecord r;
  r.kind = j.value("kind", "");
  r.epoch = io::count_or_zero(j, "epoch");
  r.step = io::count_or_zero(j, "step");
  r.loss = number_or_nan(j, "loss");
  r.accuracy = number_or_nan(j, "accuracy");
  r.lr = j.value("lr", 0.0);
  r.samples_per_second = j.value("samples_per_second", 0.0);
  r.loss_scale = j.value("loss_scale", 0.0);
  if (j.contains("grad_norm")) r.grad_norm = number_or_nan(j, "grad_norm");
  r.seconds = j.value("seconds", 0.0);
  return r;
}

std::string duration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

std::optional<MetricRecord> parse_metric_line(const std::string& line, const std::string& path) {
  try {
    return record_from_json(io::parse_json(line, path));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

RunLog::RunLog(std::string out_dir, int64_t resume_step, bool quiet, int progress)
    : out_dir_(std::move(out_dir)), quiet_(quiet), bar_(progress < 0 ? isatty(fileno(stdout)) != 0 : progress == 1) {
  if (out_dir_.empty()) return;  // a data-parallel rank other than 0: rank 0 writes the run's files
  std::error_code error;
  std::filesystem::create_directories(out_dir_, error);
  if (error)
    throw InvalidArgument(fmt::format("cannot make the run folder '{}' (\"out\" in the run config, or --out): {}; give "
                                      "a folder that can be created and written",
                                      out_dir_, error.message()));
  std::string path = out_dir_ + "/metrics.jsonl";
  // The lines kept are kept verbatim: re-encoding them could change how their numbers are written.
  std::string kept;
  if (resume_step >= 0 && std::filesystem::is_regular_file(path)) {
    std::istringstream in(io::read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      // A line cut short by the interruption (or not ours) is dropped.
      if (std::optional<MetricRecord> r = parse_metric_line(line, path); r && r->step <= resume_step) {
        records_.push_back(*r);
        kept += line + "\n";
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
    if (record.loss_scale > 0) events_->scalar("train/loss_scale", record.step, record.loss_scale);
    if (record.grad_norm) events_->scalar("train/grad_norm", record.step, *record.grad_norm);
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
  const std::string name = std::filesystem::path(out_dir_).lexically_normal().filename().string();
  io::write_file_atomically(out_dir_ + "/plot.svg", plot_svg({run_curves(name, plot_subtitle_, records_)}));
}

}  // namespace kestrel
