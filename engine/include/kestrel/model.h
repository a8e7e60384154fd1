// Models described in JSON: a static graph of torch.nn-style layers whose shapes are all known when the
// file is read. ModelSpec is the checked description; Model is one instantiated on a device, with
// parameters, ready to run forward (and, through autograd, backward).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/autograd.h"
#include "kestrel/tensor.h"

namespace kestrel::fn {
struct EmbeddedTokens;  // kestrel/functional.h
}  // namespace kestrel::fn

namespace kestrel {

// A model file that cannot be used: the message names the file, the JSON path and what is expected.
class ModelError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

class Layer;  // engine-internal: one layer kind (engine/src/model/layers*.cpp)

struct LayerInfo {
  std::string name;         // "0", "conv1": parameters are called "<name>.weight", "<name>.bias"
  std::string type;         // "linear", "conv2d", ...
  std::string json_path;    // "/layers/3"
  std::vector<int> inputs;  // indices of the producing layers; -1 is the model input
  Shape output_shape;       // with the batch dimension first (-1: any batch size)
  DType output_dtype = DType::f32;
  int64_t parameters = 0;
  // Activation checkpointing: the segment this layer belongs to ("" when none). Consecutive layers of one
  // segment keep only the segment's inputs for backward and run again there.
  std::string checkpoint;
};

// Layers first..last (indices into ModelSpec::layers()), run as one checkpointed segment.
struct CheckpointSegment {
  int first, last;
};

class ModelSpec {
 public:
  // Far beyond any real network (a 1000-layer Transformer has ~10^4), far below what exhausts memory
  // building it.
  static constexpr size_t kMaxLayers = 100000;

  // Reads and checks a model file; throws ModelError with file, JSON path and what to do.
  static ModelSpec load(const std::string& path);
  static ModelSpec parse(const std::string& text, const std::string& source);

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }
  const std::string& fingerprint() const { return fingerprint_; }  // SHA-256 of the file's text
  const Shape& input_shape() const { return input_shape_; }        // without the batch dimension
  DType input_dtype() const { return input_dtype_; }               // f32 values or i64 token ids
  // i64 input: the ids its layers (embeddings) take are [0, token_limit()); 0 for f32 input.
  int64_t token_limit() const { return token_limit_; }
  // The most positions a sequence may have (the smallest max_len of its positional layers); 0: no limit.
  int64_t max_positions() const { return max_positions_; }
  const std::vector<LayerInfo>& layers() const { return layers_; }
  int output() const { return output_; }
  const std::vector<CheckpointSegment>& checkpoint_segments() const { return segments_; }
  // Makes every layer whose name or type is in `names_or_types` a checkpointed segment of its own (a run
  // config's activation_checkpointing); returns the entries that matched no layer. Throws ModelError when
  // a layer's output is read from outside its segment.
  std::vector<std::string> checkpoint_layers(const std::vector<std::string>& names_or_types);
  int64_t parameter_count() const;
  // Keras-style table: layer, type, output shape, parameters; then totals.
  std::string summary() const;

  const Layer& layer(size_t index) const { return *impls_[index]; }

 private:
  std::string name_, source_, fingerprint_;
  Shape input_shape_;
  DType input_dtype_ = DType::f32;
  int64_t token_limit_ = 0, max_positions_ = 0;
  std::vector<LayerInfo> layers_;
  std::vector<std::shared_ptr<const Layer>> impls_;
  int output_ = -1;
  std::vector<CheckpointSegment> segments_;

  void find_segments();  // from the layers' checkpoint marks, checked
};

// The JSON Schema of model files (pretty-printed), generated from the engine's registry of layer kinds:
// what models/schema/model.schema.json holds and `kestrel schema` prints.
std::string model_schema();

struct NamedTensor;
class ParameterGrad;  // engine-internal: a parameter's lazily zeroed gradient

// A model on a device. Parameters live in one flat buffer (and gradients in another), so an optimizer
// updates all of them in a single launch and a step needs no per-parameter bookkeeping.
class Model {
 public:
  // Initialises parameters like torch's defaults (Kaiming-uniform weights, uniform biases) from `seed`,
  // with Philox on the device: the same values on every backend.
  Model(ModelSpec spec, const Device& device, uint64_t seed);

  const ModelSpec& spec() const { return spec_; }
  const Device& device() const { return device_; }

  struct Parameter {
    std::string name;
    Var var;  // a leaf whose value and gradient are views into the flat buffers
  };
  std::vector<Parameter>& parameters() { return parameters_; }
  // Non-trainable state saved with the weights (batchnorm running statistics).
  std::vector<std::pair<std::string, Tensor>>& buffers() { return buffers_; }
  Tensor& flat_parameters() { return flat_params_; }
  Tensor& flat_gradients() { return flat_grads_; }
  // Zeroes the gradients. lazy: only mark them stale, so the next backward pass overwrites them instead
  // of adding (torch's set_to_none, without the reallocation): no pass over memory. Call
  // settle_gradients() after that backward pass, before an optimizer reads them, to zero the gradients
  // of parameters the pass did not reach.
  void zero_grad(bool lazy = false);
  void settle_gradients();
  // One parameter's (by index in parameters()): data parallelism sends a gradient before the pass ends.
  void settle_gradient(size_t parameter);

  // x: (N, ...input_shape). In training mode dropout draws masks from (seed, rng_offset) and advances
  // rng_offset; batchnorm uses batch statistics. Under autocast the output is 16-bit where the last layer
  // is a product (fn::widened gives it in f32).
  Var forward(const Tensor& x, bool training, uint64_t seed, uint64_t& rng_offset);

  // Decoding a sequence a few positions at a time, as generation does: each layer carries what it needs
  // from one call to the next (a recurrent layer its h and c), so the positions already seen are not run
  // again. Begin with an empty state.
  struct DecodeState {
    std::vector<std::vector<Tensor>> carried;  // per layer
    int64_t positions = 0;                     // seen so far
  };
  // tokens: (N, t) i64, the t positions after those `state` has seen -> the model's output for them, in
  // evaluation mode and without gradient. Throws InvalidArgument for a model with a layer that is not
  // causal (it would need positions not seen yet), or past the model's input length.
  Tensor decode(const Tensor& tokens, DecodeState& state);

  // Called with a layer's index after its forward (a checkpointed segment's after its last layer), for
  // measuring what each layer keeps (Trainer::plan_memory); an empty function stops the calls.
  void set_layer_observer(std::function<void(int layer)> observer) { layer_observer_ = std::move(observer); }

 private:
  ModelSpec spec_;
  Device device_;
  Tensor flat_params_, flat_grads_;
  std::vector<Parameter> parameters_;
  std::vector<std::shared_ptr<ParameterGrad>> grads_;  // per parameter: holds the zeroing rule
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::vector<int>> layer_params_;   // per layer: indices into parameters_
  std::vector<std::vector<int>> layer_buffers_;  // per layer: indices into buffers_
  std::function<void(int)> layer_observer_;
  std::vector<std::string> layer_labels_;        // per layer: "file: /layers/3 (linear)", for anomaly reports

  Var run_layers(const Var& input, bool training, uint64_t seed, uint64_t& rng_offset, DecodeState* state);
  // Layer `index` on its inputs, updating `buffers` (its running statistics) in training. `embedded`: what
  // its first input is made of when an embedding made it; `made`: the same of its own output.
  Var run_layer(int index, const std::vector<Var>& inputs, bool training, uint64_t seed, uint64_t& rng_offset,
                std::vector<Tensor*> buffers, DecodeState* state, const fn::EmbeddedTokens* embedded = nullptr,
                std::optional<fn::EmbeddedTokens>* made = nullptr);
  // outputs: those of the layers before the segment (input: the model's).
  Var run_segment(const CheckpointSegment& segment, const Var& input, const std::vector<Var>& outputs, uint64_t seed,
                  uint64_t& rng_offset);
};

}  // namespace kestrel
