// ONNX's ModelProto in protobuf's wire format. Field numbers are those of onnx/onnx.proto (ModelProto,
// GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto, TypeProto, TensorShapeProto).
#include "onnx_graph.h"

#include <fmt/format.h>

#include <cstring>

#include "../io/protobuf_wire.h"

namespace kestrel::onnx {

namespace wire = io::wire;

Attribute attr(std::string name, int64_t value) {
  Attribute a{std::move(name), Attribute::Kind::integer};
  a.i = value;
  return a;
}
Attribute attr(std::string name, float value) {
  Attribute a{std::move(name), Attribute::Kind::number};
  a.f = value;
  return a;
}
Attribute attr(std::string name, std::string value) {
  Attribute a{std::move(name), Attribute::Kind::text};
  a.s = std::move(value);
  return a;
}
Attribute ints(std::string name, std::vector<int64_t> values) {
  Attribute a{std::move(name), Attribute::Kind::integers};
  a.ints = std::move(values);
  return a;
}
Attribute strings(std::string name, std::vector<std::string> values) {
  Attribute a{std::move(name), Attribute::Kind::texts};
  a.strings = std::move(values);
  return a;
}

std::string Graph::unique(const std::string& hint) {
  std::string name = hint.empty() ? "v" : hint;
  for (int n = 1; used_.count(name); ++n) name = fmt::format("{}_{}", hint, n);
  used_.insert(name);
  return name;
}

void Graph::input(const std::string& name, ElementType type, const Shape& shape) {
  used_.insert(name);
  inputs_.push_back({name, type, shape});
}
void Graph::output(const std::string& name, ElementType type, const Shape& shape) {
  outputs_.push_back({name, type, shape});
}

std::string Graph::initializer(const std::string& name, const Shape& shape, const std::vector<float>& values) {
  Initializer t{unique(name), ElementType::f32, shape, std::string(values.size() * sizeof(float), '\0')};
  std::memcpy(t.raw.data(), values.data(), t.raw.size());  // little-endian hosts: ONNX's raw_data order
  initializers_.push_back(std::move(t));
  return initializers_.back().name;
}
std::string Graph::int64s(const std::string& name, const std::vector<int64_t>& values) {
  Initializer t{unique(name), ElementType::i64, {int64_t(values.size())}, std::string(values.size() * 8, '\0')};
  std::memcpy(t.raw.data(), values.data(), t.raw.size());
  initializers_.push_back(std::move(t));
  return initializers_.back().name;
}
std::string Graph::scalar(const std::string& name, float value) {
  Initializer t{unique(name), ElementType::f32, {}, std::string(sizeof(float), '\0')};
  std::memcpy(t.raw.data(), &value, sizeof(float));
  initializers_.push_back(std::move(t));
  return initializers_.back().name;
}

std::string Graph::node(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint,
                        std::vector<Attribute> attributes) {
  const std::string out = unique(hint + "/" + op);
  nodes_.push_back({op, out, inputs, {out}, std::move(attributes)});
  return out;
}
void Graph::identity(const std::string& from, const std::string& to) {
  used_.insert(to);
  nodes_.push_back({"Identity", to, {from}, {to}, {}});
}

namespace {

std::string attribute_bytes(const Attribute& a) {
  // AttributeProto: name 1, f 2, i 3, s 4, floats 7, ints 8, strings 9, type 20 (FLOAT 1, INT 2,
  // STRING 3, FLOATS 6, INTS 7, STRINGS 8).
  std::string m;
  wire::bytes(m, 1, a.name);
  switch (a.kind) {
    case Attribute::Kind::number: wire::float32(m, 2, a.f), wire::integer(m, 20, 1); break;
    case Attribute::Kind::integer: wire::integer(m, 3, a.i), wire::integer(m, 20, 2); break;
    case Attribute::Kind::text: wire::bytes(m, 4, a.s), wire::integer(m, 20, 3); break;
    case Attribute::Kind::numbers:
      for (float f : a.floats) wire::float32(m, 7, f);
      wire::integer(m, 20, 6);
      break;
    case Attribute::Kind::integers:
      for (int64_t i : a.ints) wire::integer(m, 8, i);
      wire::integer(m, 20, 7);
      break;
    case Attribute::Kind::texts:
      for (const std::string& s : a.strings) wire::bytes(m, 9, s);
      wire::integer(m, 20, 8);
      break;
  }
  return m;
}

// ValueInfoProto { name 1, type 2: TypeProto { tensor_type 1: { elem_type 1, shape 2: { dim 1:
// { dim_value 1 | dim_param 2 } } } } }
std::string value_info_bytes(const std::string& name, ElementType type, const Shape& shape) {
  std::string dims;
  for (int64_t d : shape) {
    std::string dim;
    if (d < 0)
      wire::bytes(dim, 2, "N");
    else
      wire::integer(dim, 1, d);
    wire::bytes(dims, 1, dim);
  }
  std::string tensor;
  wire::integer(tensor, 1, static_cast<int32_t>(type));
  wire::bytes(tensor, 2, dims);
  std::string type_proto;
  wire::bytes(type_proto, 1, tensor);
  std::string m;
  wire::bytes(m, 1, name);
  wire::bytes(m, 2, type_proto);
  return m;
}

}  // namespace

std::string Graph::serialize(const std::string& producer_version, const std::string& doc) const {
  std::string graph;  // GraphProto: node 1, name 2, initializer 5, doc_string 10, input 11, output 12
  for (const Node& n : nodes_) {
    std::string m;  // NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
    for (const std::string& in : n.inputs) wire::bytes(m, 1, in);
    for (const std::string& out : n.outputs) wire::bytes(m, 2, out);
    wire::bytes(m, 3, n.name);
    wire::bytes(m, 4, n.op);
    for (const Attribute& a : n.attributes) wire::bytes(m, 5, attribute_bytes(a));
    wire::bytes(graph, 1, m);
  }
  wire::bytes(graph, 2, name_);
  for (const Initializer& t : initializers_) {
    std::string m;  // TensorProto: dims 1, data_type 2, name 8, raw_data 9
    for (int64_t d : t.shape) wire::integer(m, 1, d);
    wire::integer(m, 2, static_cast<int32_t>(t.type));
    wire::bytes(m, 8, t.name);
    wire::bytes(m, 9, t.raw);
    wire::bytes(graph, 5, m);
  }
  if (!doc.empty()) wire::bytes(graph, 10, doc);
  for (const Value& v : inputs_) wire::bytes(graph, 11, value_info_bytes(v.name, v.type, v.shape));
  for (const Value& v : outputs_) wire::bytes(graph, 12, value_info_bytes(v.name, v.type, v.shape));

  std::string model;  // ModelProto: ir_version 1, producer_name 2, producer_version 3, graph 7, opset_import 8
  wire::integer(model, 1, kIrVersion);
  wire::bytes(model, 2, "kestrel");
  wire::bytes(model, 3, producer_version);
  wire::bytes(model, 7, graph);
  std::string opset;  // OperatorSetIdProto: domain 1 ("" is the default ONNX domain), version 2
  wire::bytes(opset, 1, "");
  wire::integer(opset, 2, kOpset);
  wire::bytes(model, 8, opset);
  return model;
}

}  // namespace kestrel::onnx
