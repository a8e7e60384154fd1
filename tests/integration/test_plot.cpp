// plot.svg and `kestrel plot`: a run draws its curves with axes, ticks, labels and its figures, and
// several runs overlay in one picture; a folder without metrics is named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "kestrel/io.h"

namespace {

namespace fs = std::filesystem;
const std::string models = std::string(KESTREL_SOURCE_DIR) + "/models/";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Plot, ARunDrawsItsCurvesAndSeveralRunsOverlay) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_plot";
  fs::remove_all(dir);
  for (const char* seed : {"1", "2"}) {
    CliRun run = run_cli("train " + models + "fashion_mlp.train.json --train-subset 1280 --test-subset 300 --epochs 3 "
                         "--backend cpu --seed " + std::string(seed) + " --out " + (dir / (std::string("seed") + seed)).string() +
                         " --quiet");
    ASSERT_EQ(run.status, 0) << run.output;
  }
  const std::string one = kestrel::io::read_file((dir / "seed1" / "plot.svg").string());
  EXPECT_NE(one.find("training loss"), std::string::npos);
  EXPECT_NE(one.find("test accuracy"), std::string::npos);
  EXPECT_NE(one.find("optimizer step"), std::string::npos);
  EXPECT_NE(one.find("fashion_mlp on cpu:0"), std::string::npos) << "the run's model and device";
  EXPECT_NE(one.find("test accuracy "), std::string::npos) << "the final figures";
  EXPECT_EQ(count(one, "<polyline"), 4u) << "raw and smoothed training loss, test loss, test accuracy";
  EXPECT_EQ(count(one, "<circle"), 6u) << "3 epochs of test loss and accuracy";
  EXPECT_GE(count(one, "text-anchor='end'"), 6u) << "y ticks on both panels";

  const std::string out = (dir / "both.svg").string();
  CliRun both = run_cli("plot " + (dir / "seed1").string() + " " + (dir / "seed2").string() + " --out " + out);
  ASSERT_EQ(both.status, 0) << both.output;
  const std::string two = kestrel::io::read_file(out);
  EXPECT_EQ(count(two, "<polyline"), 8u);
  EXPECT_NE(two.find(">seed1<"), std::string::npos);
  EXPECT_NE(two.find(">seed2<"), std::string::npos);

  // A run of one report: one training loss (its smoothed value a rounding away from the raw one) and one
  // epoch. Each curve is a marker on a band around its value, not a range of nothing.
  CliRun short_run = run_cli("train " + models + "fashion_mlp.train.json --train-subset 128 --test-subset 100 "
                             "--epochs 1 --out " + (dir / "short").string() + " --quiet");
  ASSERT_EQ(short_run.status, 0) << short_run.output;
  const std::string short_plot = kestrel::io::read_file((dir / "short" / "plot.svg").string());
  EXPECT_GE(count(short_plot, "<circle"), 3u) << "single points are drawn as markers";
  EXPECT_GE(count(short_plot, "text-anchor='end'"), 6u) << "y ticks on a flat curve's band";

  CliRun missing = run_cli("plot " + (dir / "nothing").string());
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("nothing: no metrics.jsonl here"), std::string::npos) << missing.output;
}

}  // namespace
