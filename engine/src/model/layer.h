// One layer kind: its arguments (checked when the model file is read), shape inference, parameters,
// and forward pass in terms of differentiable functions. Engine-internal.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kestrel/functional.h"
#include "kestrel/model.h"

namespace kestrel {

struct LayerKind;
namespace onnx {
class Graph;
struct LayerIO;
}  // namespace onnx

// One argument of a layer kind, named as in torch.nn. The registry (layer_kinds()) lists them; Args
// checks a layer's JSON object against them and the JSON Schema is generated from them, so the loader,
// its error messages and the published schema cannot disagree.
struct ArgSpec {
  enum class Kind { integer, pair, number, boolean, choice };
  std::string name;
  Kind kind = Kind::integer;
  bool required = false;
  double min = 0, max = 0;    // inclusive; integers and pairs also stay within int32 (what the ops take)
  bool max_exclusive = false;  // numbers: [min, max)
  nlohmann::json fallback;     // the value when absent; null where the layer derives it (a pool's stride)
  std::vector<std::string> choices;  // a choice's names (an RNN's nonlinearity)
};

// ArgSpecs for the registry entries, one per kind.
constexpr double kIntMax = 2147483647;  // window and size arguments narrow to int32 in the ops
ArgSpec integer(std::string name, double min, nlohmann::json fallback, double max = kIntMax);  // null: required
ArgSpec optional_integer(std::string name, double min, double max);  // absent: the layer's own meaning (Args::has)
ArgSpec pair(std::string name, double min, nlohmann::json fallback);
ArgSpec required_pair(std::string name, double min);
ArgSpec number(std::string name, double min, double max, double fallback, bool max_exclusive = false);
ArgSpec boolean(std::string name, bool fallback);
ArgSpec choice(std::string name, std::vector<std::string> names);  // the first name is the fallback

// A layer's arguments, checked against its kind's ArgSpecs when constructed — types, ranges, required
// arguments, unknown keys, by the checked-JSON reader run configs use too (io/json_reader.h) — so every
// mistake is a ModelError naming the JSON path before any layer is built. The getters return the given
// value or the fallback.
class Args {
 public:
  Args(const nlohmann::json& object, std::string where, const LayerKind& kind);
  bool has(const std::string& key) const { return object_.contains(key); }
  int64_t integer(const std::string& key) const;
  // An int or an [h, w] pair, as torch's kernel_size/stride/padding.
  std::pair<int64_t, int64_t> pair(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string choice(const std::string& key) const;

 private:
  const nlohmann::json& value(const std::string& key, ArgSpec::Kind kind) const;
  const nlohmann::json& object_;
  const LayerKind& kind_;
};

struct ParamSpec {
  std::string suffix;  // "weight", "bias"
  Shape shape;
  double bound = 0;     // initialised uniform in [-bound, bound] (torch's Kaiming-uniform defaults)...
  bool constant = false;
  double value = 0;     // ...or to this constant (batchnorm's weight 1 and bias 0)...
  double normal_std = 0;  // ...or, when > 0, drawn from N(0, normal_std^2) (embeddings)
  int64_t zero_row = -1;  // a row set to zeros after the draw (an embedding's padding_idx)
};
struct BufferSpec {
  std::string suffix;
  Shape shape;
  double value;
};

struct LayerContext {
  bool training;
  uint64_t seed;
  uint64_t& rng_offset;
  const std::vector<Var>& params;
  std::vector<Tensor*> buffers;
  // Decoding step by step (Model::decode): what this layer carried over from the previous call (empty
  // at first), to be replaced by what it carries on; nullptr in an ordinary forward pass.
  std::vector<Tensor>* carried = nullptr;
  int64_t position = 0;  // decoding: positions seen before this call (where positional encodings start)
  // The first input is an embedding's output, made of these rows (a layer may read them instead)...
  const fn::EmbeddedTokens* embedded_input = nullptr;
  // ...which an embedding layer's forward says here of its own output.
  std::optional<fn::EmbeddedTokens> embedded_output;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual int arity() const { return 1; }            // number of inputs...
  virtual int optional_inputs() const { return 0; }  // ...and how many more it may take (a key-padding mask)
  // What every input holds and what the output holds: f32 values, or i64 token ids (which only a layer
  // that reads them, such as an embedding, takes).
  virtual DType input_dtype() const { return DType::f32; }
  virtual DType output_dtype() const { return DType::f32; }
  // A layer reading token ids takes those in [0, token_limit()) (an embedding's rows); 0 otherwise.
  virtual int64_t token_limit() const { return 0; }
  // The most positions a sequence may have (a positional encoding's max_len); 0: no limit.
  virtual int64_t max_positions() const { return 0; }
  // Output shape (batch first, -1 when unknown); throws ModelError-ready text via shape_error().
  virtual Shape infer(const std::vector<Shape>& inputs) const = 0;
  virtual std::vector<ParamSpec> params(const std::vector<Shape>&) const { return {}; }
  virtual std::vector<BufferSpec> buffers(const std::vector<Shape>&) const { return {}; }
  virtual Var forward(const std::vector<Var>& inputs, LayerContext& context) const = 0;
  // ONNX export (engine/src/export/): adds the nodes that compute forward()'s output in evaluation mode
  // from io's inputs and returns the output's name. The default throws InvalidArgument: no ONNX form.
  virtual std::string to_onnx(onnx::Graph& graph, const onnx::LayerIO& io) const;
  // Whether each position's output depends only on that position and earlier ones, so the model can
  // decode a sequence a few positions at a time (generation). Pointwise layers are; a bidirectional
  // RNN or a pooling over time is not.
  virtual bool causal() const { return false; }
  // linear followed by relu/gelu runs as one fused op; the activation layer then passes through.
  virtual bool fuse_activation(kestrel_activation) { return false; }
  virtual kestrel_activation activation() const { return KESTREL_ACTIVATION_NONE; }

 protected:
  // A constant tensor the layer builds on the host once per `key` (which names the device, dtype and
  // shape) and keeps: a causal mask, a table of positional encodings. Built in the eager warm-up step,
  // so a captured step replays without uploading it again.
  const Tensor& constant(const std::string& key, const std::function<Tensor()>& make) const;

 private:
  mutable std::mutex constants_mutex_;
  mutable std::map<std::string, Tensor> constants_;
};

// Thrown by infer(); the loader adds the file and JSON path.
struct ShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
std::string batch_shape_str(const Shape& shape);  // "(N, 16, 14, 14)"
[[noreturn]] inline void shape_error(const std::string& message) { throw ShapeError(message); }

// A layer kind: its name in model files, its arguments, and how to build one (the layer's class then
// gives its shape rule, parameters and forward pass, with backward beside each differentiable function).
struct LayerKind {
  std::string name;
  std::vector<ArgSpec> args;
  std::unique_ptr<Layer> (*make)(const Args&);
};

// A registry entry's factory for a layer class constructed from its Args.
template <class L>
std::unique_ptr<Layer> make_layer(const Args& a) {
  return std::make_unique<L>(a);
}

// The one registry of layer kinds (layers.cpp), in the order documentation lists them.
const std::vector<LayerKind>& layer_kinds();
// The sequence layers' entries (sequence_layers.cpp), which the registry lists after the others.
std::vector<LayerKind> sequence_layer_kinds();
// The attention and Transformer layers' entries (transformer_layers.cpp), listed last.
std::vector<LayerKind> attention_layer_kinds();
const LayerKind* find_layer_kind(const std::string& name);  // nullptr when unknown
std::string layer_kind_names();                             // "linear, conv2d, ...", for messages
// What an argument accepts, in words ("an integer from 1 to 2147483647").
std::string describe(const ArgSpec& spec);
// The JSON Schema of one layer object, generated from the registry (model_schema.cpp).
nlohmann::json layer_schema();

void mark_activation_fused(Layer& layer);

}  // namespace kestrel
