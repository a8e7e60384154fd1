// A model as an ONNX graph: its layers in order, each adding its own nodes (Layer::to_onnx), with the
// weights copied from the device as initializers.
#include <fmt/format.h>

#include <map>

#include "../model/layer.h"
#include "kestrel/export.h"
#include "kestrel/io.h"
#include "onnx_ops.h"

namespace kestrel {

std::string Layer::to_onnx(onnx::Graph&, const onnx::LayerIO&) const {
  throw InvalidArgument("this layer kind has no ONNX form yet");
}

namespace {

onnx::ElementType element_type(DType dtype) { return dtype == DType::i64 ? onnx::ElementType::i64 : onnx::ElementType::f32; }

onnx::HostTensor to_host(const std::string& name, const Tensor& t) { return {name, t.shape(), t.to_vector<float>()}; }

}  // namespace

void export_onnx(Model& model, const std::string& path) {
  const ModelSpec& spec = model.spec();
  std::map<std::string, const Tensor*> weights;  // "<layer>.<suffix>" -> value
  for (Model::Parameter& p : model.parameters()) weights[p.name] = &p.var.value();
  for (auto& [name, buffer] : model.buffers()) weights[name] = &buffer;
  auto weight = [&](const LayerInfo& info, const std::string& suffix) {
    const std::string name = info.name + "." + suffix;
    return to_host(name, *weights.at(name));
  };

  onnx::Graph graph(spec.name());
  Shape input_shape{-1};
  input_shape.insert(input_shape.end(), spec.input_shape().begin(), spec.input_shape().end());
  graph.input("input", element_type(spec.input_dtype()), input_shape);

  std::vector<std::string> outputs;  // per layer: its value's name
  for (size_t i = 0; i < spec.layers().size(); ++i) {
    const LayerInfo& info = spec.layers()[i];
    onnx::LayerIO io;
    io.name = info.name;
    for (int from : info.inputs) {
      io.inputs.push_back(from < 0 ? "input" : outputs[size_t(from)]);
      io.input_shapes.push_back(from < 0 ? input_shape : spec.layers()[size_t(from)].output_shape);
    }
    const Layer& layer = spec.layer(i);
    for (const ParamSpec& p : layer.params(io.input_shapes)) io.params.push_back(weight(info, p.suffix));
    for (const BufferSpec& b : layer.buffers(io.input_shapes)) io.buffers.push_back(weight(info, b.suffix));
    try {
      outputs.push_back(layer.to_onnx(graph, io));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}: {} ({}): cannot export to ONNX: {}", spec.source(), info.json_path,
                                        info.type, e.what()));
    }
  }
  const LayerInfo& last = spec.layers()[size_t(spec.output())];
  graph.identity(outputs[size_t(spec.output())], "output");
  graph.output("output", element_type(last.output_dtype), last.output_shape);
  const std::string doc = fmt::format("{} (from {}, model file SHA-256 {})", spec.name(), spec.source(), spec.fingerprint());
  io::write_file_atomically(path, graph.serialize(KESTREL_VERSION, doc));
}

}  // namespace kestrel
