// A model on a device: parameters in one flat buffer, initialised from the seed, and the forward pass.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "../autograd/autocast.h"
#include "layer.h"
#include "parameter_grad.h"

namespace kestrel {

Model::Model(ModelSpec spec, const Device& device, uint64_t seed) : spec_(std::move(spec)), device_(device) {
  const auto& layers = spec_.layers();
  Shape input{-1};
  input.insert(input.end(), spec_.input_shape().begin(), spec_.input_shape().end());
  auto shape_of = [&](int index) { return index < 0 ? input : layers[index].output_shape; };

  struct Pending {
    std::string name;
    ParamSpec spec;
  };
  std::vector<Pending> pending;
  layer_params_.resize(layers.size());
  layer_buffers_.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerInfo& layer = layers[i];
    const bool named = layer.name != std::to_string(i);  // a node's name, not a list position
    layer_labels_.push_back(fmt::format("{}: {} ({}{})", spec_.source(), layer.json_path, named ? layer.name + ", " : "",
                                        layer.type));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<Shape> in;
    for (int index : layers[i].inputs) in.push_back(shape_of(index));
    for (const ParamSpec& p : spec_.layer(i).params(in)) {
      layer_params_[i].push_back(static_cast<int>(pending.size()));
      pending.push_back({layers[i].name + "." + p.suffix, p});
    }
    for (const BufferSpec& b : spec_.layer(i).buffers(in)) {
      layer_buffers_[i].push_back(static_cast<int>(buffers_.size()));
      buffers_.emplace_back(layers[i].name + "." + b.suffix, Tensor::full(b.shape, b.value, DType::f32, device));
    }
  }

  int64_t total = 0;
  for (const auto& p : pending) total += shape_numel(p.spec.shape);
  flat_params_ = Tensor::empty({total}, DType::f32, device);
  flat_grads_ = Tensor::zeros({total}, DType::f32, device);
  int64_t offset = 0;
  for (size_t k = 0; k < pending.size(); ++k) {
    const auto& p = pending[k];
    int64_t n = shape_numel(p.spec.shape);
    Tensor value = flat_params_.slice(0, offset, offset + n).view(p.spec.shape);
    if (p.spec.constant) {
      ops::fill_(value, p.spec.value);
    } else if (p.spec.normal_std > 0) {
      ops::random_(value, KESTREL_DISTRIBUTION_NORMAL, seed, uint64_t(k) << 40, 0.0, p.spec.normal_std);
    } else {
      // Each parameter draws from its own counter range, so adding a layer does not reshuffle the others.
      ops::random_(value, KESTREL_DISTRIBUTION_UNIFORM, seed, uint64_t(k) << 40, -p.spec.bound, p.spec.bound);
    }
    if (p.spec.zero_row >= 0) {
      Tensor row = value.slice(0, p.spec.zero_row, p.spec.zero_row + 1);
      ops::fill_(row, 0.0);
    }
    Var var(value, true);
    grads_.push_back(std::make_shared<ParameterGrad>(flat_grads_.slice(0, offset, offset + n).view(p.spec.shape)));
    var.set_grad_buffer(grads_.back());
    parameters_.push_back({p.name, var});
    offset += n;
  }
}

void Model::zero_grad(bool lazy) {
  for (auto& grad : grads_) grad->zero(lazy);
  if (!lazy) ops::fill_(flat_grads_, 0.0);
}

void Model::settle_gradients() {
  for (auto& grad : grads_) grad->settle();
}

void Model::settle_gradient(size_t parameter) { grads_.at(parameter)->settle(); }

Var Model::forward(const Tensor& x, bool training, uint64_t seed, uint64_t& rng_offset) {
  const Shape& expected = spec_.input_shape();
  Shape got(x.shape().begin() + (x.rank() > 0 ? 1 : 0), x.shape().end());
  if (x.rank() != static_cast<int>(expected.size()) + 1 || got != expected)
    throw InvalidArgument(fmt::format("{}: the model takes input (N, {}), got {}", spec_.source(),
                                      fmt::join(expected, ", "), x.describe()));
  if (x.dtype() != spec_.input_dtype())
    throw InvalidArgument(fmt::format("{}: the model takes {} input, got {}; convert it with .to(dtype) or check the data",
                                      spec_.source(), dtype_name(spec_.input_dtype()), x.describe()));
  if (x.device() != device_)
    throw DeviceMismatch(fmt::format("{}: the model is on {} but the input {} is on {}; move it with .to(device)",
                                     spec_.source(), device_.str(), x.describe(), x.device().str()));
  return run_layers(Var(x), training, seed, rng_offset, nullptr);
}

Var Model::run_layers(const Var& input, bool training, uint64_t seed, uint64_t& rng_offset, DecodeState* state) {
  const auto& layers = spec_.layers();
  std::vector<Var> outputs(layers.size());
  // Checkpointing saves memory for backward only: evaluation and decoding keep nothing anyway.
  const bool checkpointing = training && !state && grad_enabled();
  auto segment = spec_.checkpoint_segments().begin();
  std::vector<std::optional<fn::EmbeddedTokens>> embedded(layers.size());  // per layer: its output's rows
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    while (segment != spec_.checkpoint_segments().end() && segment->last < i) ++segment;
    if (checkpointing && segment != spec_.checkpoint_segments().end() && segment->first == i) {
      outputs[segment->last] = run_segment(*segment, input, outputs, seed, rng_offset);
      i = segment->last;
      if (layer_observer_) layer_observer_(i);
      continue;
    }
    std::vector<Var> in;
    for (int index : layers[i].inputs) in.push_back(index < 0 ? input : outputs[index]);
    std::vector<Tensor*> buffers;
    for (int k : layer_buffers_[i]) buffers.push_back(&buffers_[k].second);
    const int first = layers[i].inputs.empty() ? -1 : layers[i].inputs[0];
    const fn::EmbeddedTokens* rows = first >= 0 && embedded[first] ? &*embedded[first] : nullptr;
    outputs[i] = run_layer(i, in, training, seed, rng_offset, buffers, state, rows, &embedded[i]);
    if (layer_observer_) layer_observer_(i);
  }
  // Under autocast the last layer may be a product with a 16-bit result, left so: the losses and softmax
  // widen it by autocast's rule or read it as it is (cross-entropy's fused ops), and an argmax is the same.
  return outputs[spec_.output()];
}

Var Model::run_layer(int index, const std::vector<Var>& inputs, bool training, uint64_t seed, uint64_t& rng_offset,
                     std::vector<Tensor*> buffers, DecodeState* state, const fn::EmbeddedTokens* embedded,
                     std::optional<fn::EmbeddedTokens>* made) {
  std::vector<Var> params;
  for (int k : layer_params_[index]) params.push_back(parameters_[k].var);
  LayerContext context{training, seed, rng_offset, params, std::move(buffers), state ? &state->carried[index] : nullptr,
                       state ? state->positions : 0, embedded, std::nullopt};
  LayerScope scope(layer_labels_[index].c_str());
  Var output = spec_.layer(index).forward(inputs, context);
  if (made) *made = std::move(context.embedded_output);
  return output;
}

// The segment's inputs are what its layers read from before it. Its second run (in backward) starts
// from the same random counter, so dropout draws the same masks, and updates copies of the running
// statistics, so they move once per step as without checkpointing.
Var Model::run_segment(const CheckpointSegment& segment, const Var& input, const std::vector<Var>& outputs,
                       uint64_t seed, uint64_t& rng_offset) {
  const auto& layers = spec_.layers();
  std::vector<int> sources;  // producing layers before the segment (-1: the model input), in reading order
  std::vector<Var> inputs, params;
  for (int k = segment.first; k <= segment.last; ++k) {
    for (int index : layers[k].inputs)
      if (index < segment.first && std::find(sources.begin(), sources.end(), index) == sources.end()) {
        sources.push_back(index);
        inputs.push_back(index < 0 ? input : outputs[index]);
      }
    for (int p : layer_params_[k]) params.push_back(parameters_[p].var);
  }
  auto end_offset = std::make_shared<uint64_t>(rng_offset);
  auto body = [this, segment, sources, seed, start = rng_offset, end_offset](const std::vector<Var>& in,
                                                                             bool recomputing) {
    const auto& layers = spec_.layers();
    std::vector<Var> local(segment.last - segment.first + 1);
    uint64_t offset = start;
    for (int k = segment.first; k <= segment.last; ++k) {
      std::vector<Var> layer_in;
      for (int index : layers[k].inputs)
        layer_in.push_back(index < segment.first ? in[std::find(sources.begin(), sources.end(), index) - sources.begin()]
                                                 : local[index - segment.first]);
      std::vector<Tensor> copies;
      copies.reserve(layer_buffers_[k].size());  // the pointers below must stay valid
      std::vector<Tensor*> buffers;
      for (int b : layer_buffers_[k]) {
        Tensor& buffer = buffers_[b].second;
        if (recomputing) copies.push_back(buffer.clone());
        buffers.push_back(recomputing ? &copies.back() : &buffer);
      }
      local[k - segment.first] = run_layer(k, layer_in, true, seed, offset, buffers, nullptr);
    }
    *end_offset = offset;
    return local.back();
  };
  Var out = fn::checkpoint(body, inputs, params);
  rng_offset = *end_offset;
  return out;
}

Tensor Model::decode(const Tensor& tokens, DecodeState& state) {
  NoGradGuard no_grad;
  const auto& layers = spec_.layers();
  for (size_t i = 0; i < layers.size(); ++i)
    if (!spec_.layer(i).causal())
      throw InvalidArgument(fmt::format("{}: {} ({}) is not causal: its output at a position reads later positions, so "
                                        "the model cannot generate one token at a time",
                                        spec_.source(), layers[i].json_path, layers[i].type));
  if (spec_.input_dtype() != DType::i64 || spec_.input_shape().size() != 1 || tokens.rank() != 2 ||
      tokens.dtype() != DType::i64)
    throw InvalidArgument(fmt::format("{}: decoding takes (N, t) i64 tokens into a model of token sequences, got {} for "
                                      "input (N, {})",
                                      spec_.source(), tokens.describe(), fmt::join(spec_.input_shape(), ", ")));
  state.carried.resize(layers.size());
  uint64_t unused_offset = 0;
  Var out = run_layers(Var(tokens.device() == device_ ? tokens : tokens.to(device_)), false, 0, unused_offset, &state);
  state.positions += tokens.size(1);
  return fn::widened(out).value();  // sampling reads f32
}

}  // namespace kestrel
