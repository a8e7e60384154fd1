#pragma once
#include "kestrel/config.h"
#include "kestrel/data.h"
#include "kestrel/model.h"
#include "kestrel/text.h"

#include <optional>

namespace kestrel {

struct RunData {
  data::Dataset train, test;
  std::optional<data::Vocabulary> vocabulary;  // text data: the ids' characters (or bytes)
};

// Loads, subsets and normalises the config's data, and checks that it fits the model and the loss.
RunData load_run_data(const RunConfig& config, const ModelSpec& spec);

}  // namespace kestrel
