// The Dataset container itself: sizes, prefixes and per-channel normalisation.
#include <fmt/format.h>

#include <cmath>

#include "kestrel/data.h"
#include "kestrel/error.h"

namespace kestrel::data {

int64_t Dataset::sample_numel() const { return shape_numel(sample_shape); }

int64_t Dataset::target_numel() const { return shape_numel(is_classification() ? label_shape : target_shape); }

std::string Dataset::class_name(int64_t label) const {
  if (label >= 0 && label < static_cast<int64_t>(class_names.size())) return class_names[label];
  return fmt::format("class {}", label);
}

Dataset Dataset::subset(int64_t count) const {
  if (count <= 0 || count >= size) return *this;
  const auto fits = [&](size_t available, int64_t per_sample) {
    return static_cast<int64_t>(available) >= count * per_sample;
  };
  const bool values = sample_dtype == DType::f32;  // else token ids
  if ((values ? !fits(features.size(), sample_numel()) : !fits(tokens.size(), sample_numel())) ||
      (!labels.empty() && !fits(labels.size(), target_numel())) || (!targets.empty() && !fits(targets.size(), target_numel())))
    throw InvalidArgument(fmt::format("Dataset '{}': its sample, label or target vectors are shorter than its "
                                      "size {} and sample shape {} say; fill them before taking a subset",
                                      name, size, shape_str(sample_shape)));
  Dataset out;
  out.name = name;
  out.sample_shape = sample_shape;
  out.sample_dtype = sample_dtype;
  out.token_count = token_count;
  out.label_shape = label_shape;
  out.size = count;
  out.num_classes = num_classes;  // the classes of the whole set, so label ranges stay comparable
  out.target_shape = target_shape;
  out.class_names = class_names;
  if (values)
    out.features.assign(features.begin(), features.begin() + count * sample_numel());
  else
    out.tokens.assign(tokens.begin(), tokens.begin() + count * sample_numel());
  if (!labels.empty()) out.labels.assign(labels.begin(), labels.begin() + count * target_numel());
  if (!targets.empty()) out.targets.assign(targets.begin(), targets.begin() + count * target_numel());
  return out;
}

namespace {
// One value per channel, expanded from a single value when needed.
std::vector<double> per_channel(const std::vector<double>& values, int64_t channels, const char* what,
                                const Dataset& dataset) {
  if (values.size() == 1) return std::vector<double>(static_cast<size_t>(channels), values[0]);
  if (static_cast<int64_t>(values.size()) == channels) return values;
  throw InvalidArgument(fmt::format(
      "normalize '{}': {} {} values for {} channels (sample shape {}): give one value or one per channel",
      dataset.name, values.size(), what, channels, shape_str(dataset.sample_shape)));
}
}  // namespace

void normalize(Dataset& dataset, const std::vector<double>& mean, const std::vector<double>& std) {
  if (dataset.sample_dtype != DType::f32)
    throw InvalidArgument(fmt::format("normalize '{}': its samples are token ids, which are not normalised; give no mean "
                                      "or std for this data", dataset.name));
  const int64_t channels = dataset.sample_shape.empty() ? 1 : dataset.sample_shape[0];
  if (channels <= 0)
    throw InvalidArgument(fmt::format("normalize '{}': sample shape {} has no channels", dataset.name,
                                      shape_str(dataset.sample_shape)));
  const std::vector<double> means = per_channel(mean, channels, "mean", dataset);
  const std::vector<double> stds = per_channel(std, channels, "std", dataset);
  for (int64_t c = 0; c < channels; ++c)
    if (!(stds[c] > 0) || !std::isfinite(stds[c]))  // written so that NaN fails too
      throw InvalidArgument(fmt::format("normalize '{}': std of channel {} is {}; it must be positive and finite",
                                        dataset.name, c, stds[c]));
  const int64_t per_channel_numel = dataset.sample_numel() / channels;
  const int64_t expected = dataset.size * dataset.sample_numel();
  if (static_cast<int64_t>(dataset.features.size()) != expected)
    throw InvalidArgument(fmt::format("normalize '{}': {} feature values for {} samples of shape {} (expected {})",
                                      dataset.name, dataset.features.size(), dataset.size,
                                      shape_str(dataset.sample_shape), expected));
  float* x = dataset.features.data();
  for (int64_t sample = 0; sample < dataset.size; ++sample)
    for (int64_t c = 0; c < channels; ++c) {
      const double shift = means[c], scale = stds[c];
      for (int64_t i = 0; i < per_channel_numel; ++i, ++x) *x = static_cast<float>((*x - shift) / scale);
    }
}

}  // namespace kestrel::data
