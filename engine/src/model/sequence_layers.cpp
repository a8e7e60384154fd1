// The layer kinds of sequence models beyond embedding and layernorm: recurrent layers (torch.nn.RNN,
// LSTM, GRU) and the layers that turn a sequence (N, T, F) into one vector per sample.
#include <fmt/format.h>

#include <cmath>

#include "../export/onnx_ops.h"
#include "layer.h"

namespace kestrel {

namespace {


void need_sequence(const char* type, const Shape& in) {
  if (in.size() != 3)
    shape_error(fmt::format("{} expects a batch-first sequence (N, T, features), got {}", type, batch_shape_str(in)));
}

// rnn, lstm, gru: stacked layers, each in one or two directions, over a batch-first sequence:
// (N, T, F) -> (N, T, H * directions), the top layer's output at every step (torch's `output`).
class Recurrent : public Layer {
 public:
  Recurrent(const Args& a, const char* type, fn::RecurrentCell cell)
      : type_(type),
        cell_(cell),
        hidden_(a.integer("hidden_size")),
        layers_(a.integer("num_layers")),
        bias_(a.boolean("bias")),
        dropout_(a.number("dropout")),
        directions_(a.boolean("bidirectional") ? 2 : 1) {
    if (!a.boolean("batch_first"))
      shape_error(fmt::format("{}: Kestrel's sequences are batch-first (N, T, features); batch_first must be true", type));
    if (cell == fn::RecurrentCell::rnn_tanh && a.choice("nonlinearity") == "relu") cell_ = fn::RecurrentCell::rnn_relu;
  }
  Shape infer(const std::vector<Shape>& in) const override {
    need_sequence(type_, in[0]);
    return {in[0][0], in[0][1], hidden_ * directions_};
  }
  bool causal() const override { return directions_ == 1; }  // the reverse direction reads the future
  // Per layer, per direction, as torch names them: weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
  // then the same with _reverse; all uniform in +-1/sqrt(hidden_size), as torch initialises them.
  std::vector<ParamSpec> params(const std::vector<Shape>& in) const override {
    const double bound = 1.0 / std::sqrt(double(hidden_));
    const int64_t gates = fn::gate_count(cell_) * hidden_;
    std::vector<ParamSpec> p;
    for (int64_t l = 0; l < layers_; ++l)
      for (int d = 0; d < directions_; ++d) {
        const std::string suffix = fmt::format("_l{}{}", l, d ? "_reverse" : "");
        const int64_t features = l == 0 ? in[0][2] : hidden_ * directions_;
        p.push_back({"weight_ih" + suffix, {gates, features}, bound});
        p.push_back({"weight_hh" + suffix, {gates, hidden_}, bound});
        if (bias_) {
          p.push_back({"bias_ih" + suffix, {gates}, bound});
          p.push_back({"bias_hh" + suffix, {gates}, bound});
        }
      }
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    Var x = in[0];
    const size_t per_direction = bias_ ? 4 : 2;
    for (int64_t l = 0; l < layers_; ++l) {
      // torch: dropout on every layer's output but the last, in training.
      if (l > 0 && c.training && dropout_ > 0) {
        const uint64_t offset = c.rng_offset;
        c.rng_offset += (static_cast<uint64_t>(x.value().numel()) + 3) / 4;  // a Philox word per element
        x = fn::dropout(x, dropout_, true, c.seed, offset);
      }
      std::vector<Var> outputs;
      for (int d = 0; d < directions_; ++d) {
        const size_t first = static_cast<size_t>(l * directions_ + d) * per_direction;
        fn::RecurrentWeights w{c.params[first], c.params[first + 1], bias_ ? c.params[first + 2] : Var(),
                               bias_ ? c.params[first + 3] : Var()};
        if (!c.carried) {
          outputs.push_back(fn::recurrent_layer(x, w, cell_, d == 1, nullptr, l == 0 ? c.embedded_input : nullptr));
          continue;
        }
        // Decoding step by step (one direction): each layer's h and c go on from the previous call.
        c.carried->resize(static_cast<size_t>(2 * layers_));
        fn::RecurrentState state{(*c.carried)[2 * l], (*c.carried)[2 * l + 1]};
        outputs.push_back(fn::recurrent_layer(x, w, cell_, false, &state));
        (*c.carried)[2 * l] = state.h;
        (*c.carried)[2 * l + 1] = state.c;
      }
      x = directions_ == 1 ? outputs[0] : fn::concat(outputs, 2);
    }
    return x;
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return onnx::recurrent(g, io.inputs[0], cell_, hidden_, layers_, directions_, bias_, io.params, io.name);
  }

 private:
  const char* type_;
  fn::RecurrentCell cell_;
  int64_t hidden_, layers_;
  bool bias_;
  double dropout_;
  int directions_;
};

// (N, T, F) -> (N, F): the last step (a classifier reading an RNN's final output; for a unidirectional
// RNN that is torch's h_n of the top layer).
class LastStep : public Layer {
 public:
  Shape infer(const std::vector<Shape>& in) const override {
    need_sequence("last_step", in[0]);
    return {in[0][0], in[0][2]};
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override {
    return fn::select(in[0], 1, in[0].value().size(1) - 1);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    const Shape& in = io.input_shapes[0];
    const std::string last = g.node("Gather", {io.inputs[0], g.int64s(io.name + "/last", {in[1] - 1})}, io.name,
                                    {onnx::attr("axis", 1)});  // (N, 1, F)
    return onnx::reshape(g, last, {0, in[2]}, io.name);
  }
};

// (N, T, F) -> (N, F): the mean over the steps.
class MeanOverTime : public Layer {
 public:
  Shape infer(const std::vector<Shape>& in) const override {
    need_sequence("mean_over_time", in[0]);
    return {in[0][0], in[0][2]};
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override { return fn::mean_over(in[0], 1); }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return g.node("ReduceMean", {io.inputs[0]}, io.name, {onnx::ints("axes", {1}), onnx::attr("keepdims", 0)});
  }
};

template <fn::RecurrentCell cell>
std::unique_ptr<Layer> make_recurrent(const Args& a) {
  const char* type = cell == fn::RecurrentCell::lstm ? "lstm" : cell == fn::RecurrentCell::gru ? "gru" : "rnn";
  return std::make_unique<Recurrent>(a, type, cell);
}
std::unique_ptr<Layer> make_last_step(const Args&) { return std::make_unique<LastStep>(); }
std::unique_ptr<Layer> make_mean_over_time(const Args&) { return std::make_unique<MeanOverTime>(); }

// torch's arguments of nn.RNN/LSTM/GRU (input_size comes from the input).
std::vector<ArgSpec> recurrent_args(bool nonlinearity) {
  std::vector<ArgSpec> args{integer("hidden_size", 1, nullptr), integer("num_layers", 1, 1, 64), boolean("bias", true),
                            boolean("batch_first", true), number("dropout", 0, 1, 0.0, true),
                            boolean("bidirectional", false)};
  if (nonlinearity) args.push_back(choice("nonlinearity", {"tanh", "relu"}));
  return args;
}

}  // namespace

std::vector<LayerKind> sequence_layer_kinds() {
  return {
      {"rnn", recurrent_args(true), make_recurrent<fn::RecurrentCell::rnn_tanh>},
      {"lstm", recurrent_args(false), make_recurrent<fn::RecurrentCell::lstm>},
      {"gru", recurrent_args(false), make_recurrent<fn::RecurrentCell::gru>},
      {"last_step", {}, make_last_step},
      {"mean_over_time", {}, make_mean_over_time},
  };
}

}  // namespace kestrel
