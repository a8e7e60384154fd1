// One synthetic batch for a model's training-step benchmarks (bench_train, bench_memory).
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "kestrel/model.h"
#include "kestrel/ops.h"
#include "kestrel/tensor.h"

namespace kestrel_bench {

// Inputs and labels of one batch: standard-normal values and labels 0..9, or for a model of token ids
// (fortunes' 113 characters) ids with a label per position, or one per sample for a classifier of
// sequences (an (N, C) output), whose documents are left-padded with id 0 as the text categories' are
// (sample n by (97 n) mod T positions: half the positions on average, the fortunes' 53%).
inline std::pair<kestrel::Tensor, kestrel::Tensor> batch_for(const kestrel::ModelSpec& spec, int64_t batch,
                                                             const kestrel::Device& device) {
  kestrel::Shape shape{batch};
  shape.insert(shape.end(), spec.input_shape().begin(), spec.input_shape().end());
  if (spec.input_dtype() == kestrel::DType::i64) {
    std::vector<int64_t> ids(static_cast<size_t>(kestrel::shape_numel(shape)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 7919 % 113);
    const kestrel::Shape& scores = spec.layers()[static_cast<size_t>(spec.output())].output_shape;
    if (scores.size() == 2) {  // (N, C): a class per sample
      const int64_t length = kestrel::shape_numel(shape) / batch;
      for (int64_t n = 0; n < batch; ++n)
        std::fill(ids.begin() + n * length, ids.begin() + n * length + (97 * n) % length, 0);
      std::vector<int64_t> classes(static_cast<size_t>(batch));
      for (int64_t i = 0; i < batch; ++i) classes[i] = i % scores[1];
      return {kestrel::Tensor::from_vector(ids, shape, device), kestrel::Tensor::from_vector(classes, {batch}, device)};
    }
    std::vector<int64_t> next(ids.begin() + 1, ids.end());
    next.push_back(0);
    return {kestrel::Tensor::from_vector(ids, shape, device), kestrel::Tensor::from_vector(next, shape, device)};
  }
  kestrel::Tensor x = kestrel::Tensor::empty(shape, kestrel::DType::f32, device);
  kestrel::ops::random_(x, KESTREL_DISTRIBUTION_NORMAL, 1, 0, 0, 1);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % 10;
  return {x, kestrel::Tensor::from_vector(labels, {batch}, device)};
}

}  // namespace kestrel_bench
