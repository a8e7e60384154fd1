// One layer kind: its arguments (checked when the model file is read), shape inference, parameters,
// and forward pass in terms of differentiable functions. Engine-internal.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kestrel/functional.h"
#include "kestrel/model.h"

namespace kestrel {

// Reads a layer's arguments with torch.nn names; every mistake becomes a ModelError with the JSON path.
class Args {
 public:
  Args(const nlohmann::json& object, std::string where, std::string type);
  int64_t integer(const std::string& key, int64_t fallback, int64_t min);
  int64_t required_integer(const std::string& key, int64_t min);
  // An int or a [h, w] pair, as torch's kernel_size/stride/padding.
  std::pair<int64_t, int64_t> pair(const std::string& key, std::pair<int64_t, int64_t> fallback, int64_t min,
                                   bool required = false);
  double number(const std::string& key, double fallback, double min, double max);
  bool boolean(const std::string& key, bool fallback);
  // Throws for any key not read, naming the valid ones.
  void finish() const;

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  const nlohmann::json* take(const std::string& key);
  const nlohmann::json& object_;
  std::string where_, type_;
  std::vector<std::string> known_;
};

struct ParamSpec {
  std::string suffix;  // "weight", "bias"
  Shape shape;
  double bound = 0;     // initialised uniform in [-bound, bound] (torch's Kaiming-uniform defaults)...
  bool constant = false;
  double value = 0;     // ...or to this constant (batchnorm's weight 1 and bias 0)
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
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual int arity() const { return 1; }  // number of inputs
  // Output shape (batch first, -1 when unknown); throws ModelError-ready text via shape_error().
  virtual Shape infer(const std::vector<Shape>& inputs) const = 0;
  virtual std::vector<ParamSpec> params(const std::vector<Shape>&) const { return {}; }
  virtual std::vector<BufferSpec> buffers(const std::vector<Shape>&) const { return {}; }
  virtual Var forward(const std::vector<Var>& inputs, LayerContext& context) const = 0;
  // linear followed by relu/gelu runs as one fused op; the activation layer then passes through.
  virtual bool fuse_activation(kestrel_activation) { return false; }
  virtual kestrel_activation activation() const { return KESTREL_ACTIVATION_NONE; }
};

// Thrown by infer(); the loader adds the file and JSON path.
struct ShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
std::string batch_shape_str(const Shape& shape);  // "(N, 16, 14, 14)"

std::unique_ptr<Layer> make_layer(const std::string& type, Args& args);
const std::vector<std::string>& layer_types();
void mark_activation_fused(Layer& layer);

}  // namespace kestrel
