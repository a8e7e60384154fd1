#pragma once
#include "kestrel/config.h"
#include "kestrel/data.h"
#include "kestrel/model.h"
#include "kestrel/text.h"

#include <memory>
#include <mutex>
#include <optional>

namespace kestrel {

struct RunData {
  data::Dataset train, test;
  std::optional<data::Vocabulary> vocabulary;  // text data: the ids' characters (or bytes)
};

// Loads, subsets and normalises the config's data, and checks that it fits the model and the loss.
RunData load_run_data(const RunConfig& config, const ModelSpec& spec);

// A run's data for the ranks of one process (MultiDeviceTrainer): the first rank to ask loads it, once its
// own checks of the config have passed; the others wait for it and share it (they only read it). A load
// that throws is tried again by the next rank to ask, so each rank reports the failure.
class SharedRunData {
 public:
  std::shared_ptr<const RunData> get(const RunConfig& config, const ModelSpec& spec) {
    std::call_once(loaded_, [&] { data_ = std::make_shared<const RunData>(load_run_data(config, spec)); });
    return data_;
  }

 private:
  std::once_flag loaded_;
  std::shared_ptr<const RunData> data_;
};

}  // namespace kestrel
