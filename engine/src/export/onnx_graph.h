// An ONNX graph being built, then written as a ModelProto (opset 17, IR version 8) in protobuf's wire
// format. Layers add their nodes through it (Layer::to_onnx); names are made unique here. Engine-internal.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kestrel/tensor.h"

namespace kestrel::onnx {

constexpr int64_t kOpset = 17;      // LayerNormalization's first opset; onnxruntime runs it everywhere
constexpr int64_t kIrVersion = 8;   // the IR version opset 17 came with

// One node attribute: an int, a float, a string, or a list of ints, floats or strings.
struct Attribute {
  enum class Kind { integer, number, text, integers, numbers, texts };
  std::string name;
  Kind kind = Kind::integer;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
};
Attribute attr(std::string name, int64_t value);
Attribute attr(std::string name, float value);
Attribute attr(std::string name, std::string value);
inline Attribute attr(std::string name, int value) { return attr(std::move(name), int64_t(value)); }
Attribute ints(std::string name, std::vector<int64_t> values);
Attribute strings(std::string name, std::vector<std::string> values);

// A parameter or buffer copied to the host, named as in the weights file ("0.weight").
struct HostTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;  // row-major
};

// The ONNX value types Kestrel's models use.
enum class ElementType : int32_t { f32 = 1, i64 = 7 };

class Graph {
 public:
  explicit Graph(std::string name) : name_(std::move(name)) {}

  // Graph inputs and outputs; a dim of -1 is the batch, named "N" so any batch size runs.
  void input(const std::string& name, ElementType type, const Shape& shape);
  void output(const std::string& name, ElementType type, const Shape& shape);

  // A weight (stored in the file): returns its name, made unique.
  std::string initializer(const std::string& name, const Shape& shape, const std::vector<float>& values);
  std::string initializer(const HostTensor& t) { return initializer(t.name, t.shape, t.values); }
  std::string int64s(const std::string& name, const std::vector<int64_t>& values);  // a 1-D i64 constant
  std::string scalar(const std::string& name, float value);                         // a 0-D f32 constant

  // A node with one output, named after `hint` (the layer it belongs to); returns the output's name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint,
                   std::vector<Attribute> attributes = {});
  // Renames the graph value `from` to the graph output `to` with an Identity node.
  void identity(const std::string& from, const std::string& to);

  // The ModelProto's bytes.
  std::string serialize(const std::string& producer_version, const std::string& doc) const;

 private:
  struct Node {
    std::string op, name;
    std::vector<std::string> inputs, outputs;
    std::vector<Attribute> attributes;
  };
  struct Value {
    std::string name;
    ElementType type;
    Shape shape;
  };
  struct Initializer {
    std::string name;
    ElementType type;
    Shape shape;
    std::string raw;  // little-endian values
  };
  std::string unique(const std::string& hint);

  std::string name_;
  std::vector<Node> nodes_;
  std::vector<Value> inputs_, outputs_;
  std::vector<Initializer> initializers_;
  std::set<std::string> used_;  // names taken, for unique()
};

}  // namespace kestrel::onnx
