// Reading a model file: JSON -> checked layer graph with every shape inferred, or a ModelError that
// names the file, the JSON path and what to change.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>
#include <sstream>

#include "../io/json_text.h"
#include "kestrel/io.h"
#include "layer.h"

namespace kestrel {

namespace {

// Far beyond any real tensor (4 TiB of f32), far below where products of sizes overflow int64: every
// shape a model declares or infers, and every parameter, is held to it, so layers may multiply sizes.
constexpr int64_t kMaxElements = int64_t(1) << 40;

// The elements of shape[from:], or nothing for an extent below 1 or a count beyond kMaxElements.
std::optional<int64_t> bounded_numel(const Shape& shape, size_t from) {
  int64_t n = 1;
  for (size_t d = from; d < shape.size(); ++d)
    if (shape[d] < 1 || __builtin_mul_overflow(n, shape[d], &n) || n > kMaxElements) return std::nullopt;
  return n;
}

// The model's input: its per-sample shape and what it holds — f32 values, or i64 token ids for layers
// that read them.
std::pair<Shape, DType> read_input(const nlohmann::json& doc, const std::string& source) {
  auto input = doc.find("input");
  if (input == doc.end() || !input->is_object() || !input->contains("shape"))
    throw ModelError(fmt::format("{}: /input: expected {{\"shape\": [C, H, W] or [features]}} (without the batch dimension)",
                                 source));
  const auto& shape = (*input)["shape"];
  if (!shape.is_array() || shape.empty())
    throw ModelError(fmt::format("{}: /input/shape: expected a non-empty array of positive integers, got {}", source, shape.dump()));
  Shape out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!shape[i].is_number_integer() || shape[i].get<int64_t>() < 1)
      throw ModelError(fmt::format("{}: /input/shape/{}: expected a positive integer, got {}", source, i, shape[i].dump()));
    out.push_back(shape[i].get<int64_t>());
  }
  DType dtype = DType::f32;
  if (input->contains("dtype")) {
    const auto& given = (*input)["dtype"];
    if (given == "i64")
      dtype = DType::i64;
    else if (given != "f32")
      throw ModelError(fmt::format("{}: /input/dtype: expected \"f32\" (values) or \"i64\" (token ids), got {}", source,
                                   given.dump()));
  }
  for (const auto& [key, value] : input->items())
    if (key != "shape" && key != "dtype")
      throw ModelError(fmt::format("{}: /input/{}: unknown key; valid keys: shape, dtype", source, key));
  if (!bounded_numel(out, 0))
    throw ModelError(fmt::format("{}: /input/shape: {} holds more than 2^40 elements per sample", source,
                                 shape.dump()));
  if (out.size() + 1 > KESTREL_MAX_RANK)
    throw ModelError(fmt::format("{}: /input/shape: {} has {} axes, {} with the batch's: tensors have at most {}", source,
                                 shape.dump(), out.size(), out.size() + 1, KESTREL_MAX_RANK));
  return {out, dtype};
}

const char* dtype_meaning(DType dtype) { return dtype == DType::i64 ? "i64 token ids" : "f32 values"; }

}  // namespace

ModelSpec ModelSpec::load(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path, io::kMaxTextFileBytes);
  } catch (const InvalidArgument& e) {
    throw ModelError(e.what());
  }
  return parse(text, path);
}

ModelSpec ModelSpec::parse(const std::string& text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = io::parse_json(text, source);
  } catch (const InvalidArgument& e) {
    throw ModelError(e.what());
  }
  if (!doc.is_object()) throw ModelError(fmt::format("{}: expected a JSON object with \"input\" and \"layers\"", source));
  for (const auto& [key, value] : doc.items())
    if (key != "name" && key != "input" && key != "layers" && key != "nodes" && key != "output" && key != "$schema" &&
        key != "description")
      throw ModelError(fmt::format("{}: /{}: unknown key; valid keys: name, description, input, layers or nodes, output",
                                   source, key));

  ModelSpec spec;
  spec.source_ = source;
  spec.fingerprint_ = io::sha256_hex(text);
  for (const char* key : {"name", "description", "$schema"})
    if (doc.contains(key) && !doc[key].is_string())
      throw ModelError(fmt::format("{}: /{}: expected a string, got {}", source, key, doc[key].dump()));
  spec.name_ = doc.value("name", std::filesystem::path(source).stem().string());
  std::tie(spec.input_shape_, spec.input_dtype_) = read_input(doc, source);

  const bool graph = doc.contains("nodes");
  if (graph == doc.contains("layers"))
    throw ModelError(fmt::format("{}: give either \"layers\" (a sequential list) or \"nodes\" (named layers with inputs)", source));
  const char* list_key = graph ? "nodes" : "layers";
  const auto& list = doc[list_key];
  if (!list.is_array() || list.empty())
    throw ModelError(fmt::format("{}: /{}: expected a non-empty array of layer objects", source, list_key));
  if (list.size() > ModelSpec::kMaxLayers)
    throw ModelError(fmt::format("{}: /{}: {} layers; a model may have at most {} (is the file generated wrongly?)",
                                 source, list_key, list.size(), ModelSpec::kMaxLayers));

  std::map<std::string, int> by_name{{"input", -1}};
  std::vector<Shape> shapes;
  std::vector<std::unique_ptr<Layer>> layers;
  Shape input_with_batch{-1};
  input_with_batch.insert(input_with_batch.end(), spec.input_shape_.begin(), spec.input_shape_.end());
  auto shape_of = [&](int index) { return index < 0 ? input_with_batch : shapes[index]; };
  auto dtype_of = [&](int index) { return index < 0 ? spec.input_dtype_ : spec.layers_[index].output_dtype; };

  for (size_t i = 0; i < list.size(); ++i) {
    std::string where = fmt::format("{}: /{}/{}", source, list_key, i);
    const auto& object = list[i];
    if (!object.is_object() || !object.contains("type") || !object["type"].is_string())
      throw ModelError(fmt::format("{}: expected an object with a \"type\" (one of {})", where, layer_kind_names()));
    LayerInfo info;
    info.type = object["type"].get<std::string>();
    info.json_path = fmt::format("/{}/{}", list_key, i);
    if (graph && (!object.contains("name") || !object["name"].is_string()))
      throw ModelError(fmt::format("{}/name: nodes need a unique string name", where));
    if (object.contains("name") && !object["name"].is_string())
      throw ModelError(fmt::format("{}/name: a layer's name is a string, got {}", where, object["name"].dump()));
    info.name = object.contains("name") && object["name"].is_string() ? object["name"].get<std::string>() : std::to_string(i);
    if (by_name.count(info.name)) throw ModelError(fmt::format("{}/name: the name '{}' is used twice", where, info.name));

    const LayerKind* kind = find_layer_kind(info.type);
    if (!kind)
      throw ModelError(fmt::format("{}/type: unknown layer type '{}'; known types: {}", where, info.type, layer_kind_names()));
    std::unique_ptr<Layer> layer;
    try {
      layer = kind->make(Args(object, where, *kind));
    } catch (const ShapeError& e) {
      throw ModelError(fmt::format("{}: {}", where, e.what()));
    }

    if (object.contains("checkpoint")) {
      const auto& mark = object["checkpoint"];
      if (mark.is_boolean())
        info.checkpoint = mark.get<bool>() ? "#" + std::to_string(i) : "";  // a segment of its own
      else if (mark.is_string() && !mark.get<std::string>().empty())
        info.checkpoint = mark.get<std::string>();
      else
        throw ModelError(fmt::format("{}/checkpoint: expected true (checkpoint this layer) or the name of a segment "
                                     "of consecutive layers, got {}",
                                     where, mark.dump()));
    }
    if (object.contains("inputs")) {
      if (!graph) throw ModelError(fmt::format("{}/inputs: \"inputs\" belongs in \"nodes\" models; \"layers\" run in order", where));
      const auto& inputs = object["inputs"];
      if (!inputs.is_array()) throw ModelError(fmt::format("{}/inputs: expected an array of node names", where));
      for (size_t k = 0; k < inputs.size(); ++k) {
        auto found = inputs[k].is_string() ? by_name.find(inputs[k].get<std::string>()) : by_name.end();
        if (found == by_name.end())
          throw ModelError(fmt::format("{}/inputs/{}: {} is not \"input\" or the name of an earlier node", where, k,
                                       inputs[k].dump()));
        info.inputs.push_back(found->second);
      }
    } else {
      info.inputs.push_back(static_cast<int>(i) - 1);
    }
    if (const int given = static_cast<int>(info.inputs.size()), least = layer->arity(),
        most = least + layer->optional_inputs();
        given < least || given > most)
      throw ModelError(fmt::format("{}/inputs: {} takes {} input(s), got {}", where, info.type,
                                   least == most ? std::to_string(least) : fmt::format("{} to {}", least, most), given));

    // A layer's optional inputs are key-padding masks (attention's): 0/1 values from a key_padding_mask
    // layer of the tokens. Any other (N, T) node would scale its keys' scores by its values.
    for (size_t k = size_t(layer->arity()); k < info.inputs.size(); ++k)
      if (info.inputs[k] < 0 || spec.layers_[size_t(info.inputs[k])].type != "key_padding_mask")
        throw ModelError(fmt::format("{}/inputs/{}: {}'s input {} is a key-padding mask: name a key_padding_mask layer "
                                     "of the tokens, not {}",
                                     where, k, info.type, k,
                                     info.inputs[k] < 0 ? std::string("the model's input")
                                                        : "'" + spec.layers_[size_t(info.inputs[k])].name + "' (" +
                                                              spec.layers_[size_t(info.inputs[k])].type + ")"));
    for (size_t k = 0; k < info.inputs.size(); ++k)
      if (dtype_of(info.inputs[k]) != layer->input_dtype())
        throw ModelError(fmt::format("{}: {} reads {}, but its input {} holds {}; {}", where, info.type,
                                     dtype_meaning(layer->input_dtype()), k, dtype_meaning(dtype_of(info.inputs[k])),
                                     layer->input_dtype() == DType::f32 ? "only a layer that reads token ids can take them"
                                                                        : "give it the model's i64 input"));
    info.output_dtype = layer->output_dtype();
    if (const int64_t limit = layer->max_positions())
      spec.max_positions_ = spec.max_positions_ ? std::min(spec.max_positions_, limit) : limit;
    for (int index : info.inputs)  // token ids of the model's input reach this layer
      if (index < 0 && layer->token_limit() > 0)
        spec.token_limit_ = spec.token_limit_ ? std::min(spec.token_limit_, layer->token_limit()) : layer->token_limit();
    std::vector<Shape> in_shapes;
    for (int index : info.inputs) in_shapes.push_back(shape_of(index));
    try {
      info.output_shape = layer->infer(in_shapes);
    } catch (const ShapeError& e) {
      throw ModelError(fmt::format("{}: {}", where, e.what()));
    }
    if (!bounded_numel(info.output_shape, 1))
      throw ModelError(fmt::format("{}: {} gives {}: an empty axis, or more than 2^40 elements per sample", where,
                                   info.type, batch_shape_str(info.output_shape)));
    if (info.output_shape.size() > KESTREL_MAX_RANK)
      throw ModelError(fmt::format("{}: {} gives {}, {} axes with the batch's: tensors have at most {}", where,
                                   info.type, batch_shape_str(info.output_shape), info.output_shape.size(),
                                   KESTREL_MAX_RANK));
    for (const auto& p : layer->params(in_shapes)) {
      const std::optional<int64_t> n = bounded_numel(p.shape, 0);
      if (!n)
        throw ModelError(fmt::format("{}: {}'s {} would be {}: an empty axis, or more than 2^40 elements", where,
                                     info.type, p.suffix, shape_str(p.shape)));
      info.parameters += *n;
    }
    by_name[info.name] = static_cast<int>(i);
    shapes.push_back(info.output_shape);
    spec.layers_.push_back(info);
    layers.push_back(std::move(layer));
  }

  spec.output_ = static_cast<int>(list.size()) - 1;
  if (doc.contains("output")) {
    auto found = doc["output"].is_string() ? by_name.find(doc["output"].get<std::string>()) : by_name.end();
    if (found == by_name.end() || found->second < 0)
      throw ModelError(fmt::format("{}: /output: {} is not the name of a node", source, doc["output"].dump()));
    spec.output_ = found->second;
  }

  // Fold relu/gelu into the linear layer (relu into the convolution) before it when nothing else reads
  // that layer's output.
  std::vector<int> consumers(layers.size(), 0);
  for (const auto& info : spec.layers_)
    for (int index : info.inputs)
      if (index >= 0) ++consumers[index];
  for (size_t i = 0; i < layers.size(); ++i) {
    kestrel_activation act = layers[i]->activation();
    int source_index = spec.layers_[i].inputs[0];
    auto fusing = [](const std::string& type) { return type == "linear" || type == "conv2d"; };
    if (act == KESTREL_ACTIVATION_NONE || source_index < 0 || !fusing(spec.layers_[source_index].type)) continue;
    if (consumers[source_index] != 1 || source_index == spec.output_ || fusing(spec.layers_[i].type)) continue;
    if (layers[source_index]->fuse_activation(act)) mark_activation_fused(*layers[i]);
  }
  for (auto& layer : layers) spec.impls_.push_back(std::move(layer));
  spec.find_segments();
  return spec;
}

void ModelSpec::find_segments() {
  segments_.clear();
  std::vector<std::vector<int>> readers(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i)
    for (int index : layers_[i].inputs)
      if (index >= 0) readers[index].push_back(static_cast<int>(i));
  std::map<std::string, int> closed;  // segment name -> its last layer, once a layer outside it followed
  for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
    const std::string& name = layers_[i].checkpoint;
    if (name.empty()) continue;
    if (!segments_.empty()) {
      CheckpointSegment& previous = segments_.back();
      if (layers_[previous.last].checkpoint == name && previous.last == i - 1) {
        previous.last = i;
        continue;
      }
      closed[layers_[previous.last].checkpoint] = previous.last;
    }
    if (auto found = closed.find(name); found != closed.end())
      throw ModelError(fmt::format("{}: {}/checkpoint: segment '{}' ended at {}; a segment is consecutive layers "
                                   "(give this one another name)",
                                   source_, layers_[i].json_path, name, layers_[found->second].json_path));
    segments_.push_back({i, i});
  }
  // Inside a segment only the last layer's output may be read later: the others are not kept.
  for (const CheckpointSegment& segment : segments_)
    for (int k = segment.first; k < segment.last; ++k) {
      const LayerInfo& layer = layers_[k];
      const std::string span = fmt::format("{} to {}", layers_[segment.first].json_path, layers_[segment.last].json_path);
      if (k == output_)
        throw ModelError(fmt::format("{}: {}/checkpoint: {} is the model's output but not the last layer of its "
                                     "checkpoint segment ({}); end the segment there",
                                     source_, layer.json_path, layer.name, span));
      for (int reader : readers[k])
        if (reader > segment.last)
          throw ModelError(fmt::format("{}: {}/checkpoint: the output of {} ({}) is read by {}, outside its checkpoint "
                                       "segment ({}); only a segment's last layer may feed later layers",
                                       source_, layer.json_path, layer.name, layer.type, layers_[reader].json_path,
                                       span));
    }
}

std::vector<std::string> ModelSpec::checkpoint_layers(const std::vector<std::string>& names_or_types) {
  std::vector<std::string> unmatched;
  for (const std::string& entry : names_or_types) {
    bool matched = false;
    for (size_t i = 0; i < layers_.size(); ++i)
      if (layers_[i].name == entry || layers_[i].type == entry) {
        layers_[i].checkpoint = "#" + std::to_string(i);
        matched = true;
      }
    if (!matched) unmatched.push_back(entry);
  }
  find_segments();
  return unmatched;
}

int64_t ModelSpec::parameter_count() const {
  int64_t total = 0;
  for (const auto& layer : layers_) total += layer.parameters;
  return total;
}

std::string ModelSpec::summary() const {
  Shape input{-1};
  input.insert(input.end(), input_shape_.begin(), input_shape_.end());
  std::vector<std::array<std::string, 3>> rows{{"input", batch_shape_str(input), "0"}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& layer = layers_[i];
    std::string type = layer.type;
    if (impls_[i]->activation() != KESTREL_ACTIVATION_NONE && (layer.type == "linear" || layer.type == "conv2d"))
      type += impls_[i]->activation() == KESTREL_ACTIVATION_RELU ? "+relu" : "+gelu";
    rows.push_back({fmt::format("{} ({})", layer.name, type), batch_shape_str(layer.output_shape),
                    std::to_string(layer.parameters)});
  }
  // Columns as wide as their longest entry (at least Keras's), so long node names keep the table aligned.
  size_t name_width = 28, shape_width = 22;
  for (const auto& row : rows) name_width = std::max(name_width, row[0].size()), shape_width = std::max(shape_width, row[1].size());
  const std::string rule(name_width + shape_width + 14, '-');
  std::ostringstream out;
  out << fmt::format("Model: {} ({})\n", name_, source_);
  out << fmt::format("{:<{}} {:<{}} {:>12}\n", "Layer (type)", name_width, "Output shape", shape_width, "Param #");
  out << rule << "\n";
  for (const auto& row : rows) out << fmt::format("{:<{}} {:<{}} {:>12}\n", row[0], name_width, row[1], shape_width, row[2]);
  out << rule << "\n";
  int64_t total = parameter_count();
  out << fmt::format("Total parameters: {} ({:.2f} MiB as f32)\n", total, total * 4.0 / (1 << 20));
  return out.str();
}

}  // namespace kestrel
