// The layer kinds a model file may use, named and parameterised as in torch.nn.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "../export/onnx_ops.h"
#include "layer.h"

namespace kestrel {

namespace {


void need_rank(const char* type, const Shape& in, size_t rank, const char* layout, const char* hint) {
  if (in.size() != rank)
    shape_error(fmt::format("{} expects a rank-{} input {}, got {}{}", type, rank, layout, batch_shape_str(in), hint));
}

ops::Window make_window(std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> stride,
                        std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation) {
  ops::Window w;
  w.kernel_h = int(kernel.first), w.kernel_w = int(kernel.second);
  w.stride_h = int(stride.first), w.stride_w = int(stride.second);
  w.pad_h = int(padding.first), w.pad_w = int(padding.second);
  w.dilation_h = int(dilation.first), w.dilation_w = int(dilation.second);
  return w;
}

// ONNX's Conv/MaxPool/AveragePool attributes for a window (pads: begin h, w then end h, w).
std::vector<onnx::Attribute> window_attributes(const ops::Window& w, bool dilations) {
  std::vector<onnx::Attribute> a{onnx::ints("kernel_shape", {w.kernel_h, w.kernel_w}),
                                 onnx::ints("strides", {w.stride_h, w.stride_w}),
                                 onnx::ints("pads", {w.pad_h, w.pad_w, w.pad_h, w.pad_w})};
  if (dilations) a.push_back(onnx::ints("dilations", {w.dilation_h, w.dilation_w}));
  return a;
}

Shape windowed_shape(const char* type, const Shape& in, int64_t channels, const ops::Window& w) {
  int64_t oh = w.out_h(in[2]), ow = w.out_w(in[3]);
  if (oh < 1 || ow < 1)
    shape_error(fmt::format("{}: a {}x{} window (dilation {}x{}, padding {}x{}) does not fit the {}x{} input {}", type,
                            w.kernel_h, w.kernel_w, w.dilation_h, w.dilation_w, w.pad_h, w.pad_w, in[2], in[3],
                            batch_shape_str(in)));
  return {in[0], channels, oh, ow};
}

class Linear : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  explicit Linear(const Args& a) : out_(a.integer("out_features")), bias_(a.boolean("bias")) {}
  // (N, features) or a sequence (N, T, features), over the last axis as torch. An image (N, C, H, W) is
  // refused rather than mapped over its width: there a missing flatten is the likely mistake.
  Shape infer(const std::vector<Shape>& in) const override {
    if (in[0].size() != 2 && in[0].size() != 3)
      shape_error(fmt::format("linear expects a rank-2 input (N, features) or a rank-3 sequence (N, T, features), "
                              "got {}{}",
                              batch_shape_str(in[0]), in[0].size() > 3 ? "; add a flatten layer before it" : ""));
    Shape out = in[0];
    out.back() = out_;
    return out;
  }
  std::vector<ParamSpec> params(const std::vector<Shape>& in) const override {
    const int64_t features = in[0].back();
    double bound = 1.0 / std::sqrt(double(features));  // kaiming_uniform_(a=sqrt(5)) and the bias rule of torch
    std::vector<ParamSpec> p{{"weight", {out_, features}, bound}};
    if (bias_) p.push_back({"bias", {out_}, bound});
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    const Var& bias = bias_ ? c.params[1] : Var();
    const Shape& shape = in[0].value().shape();
    if (shape.size() == 2) return fn::linear(in[0], c.params[0], bias, activation_);
    // A sequence: its positions fold into the batch of one product.
    Var rows = fn::linear(fn::reshape(in[0], {-1, shape.back()}), c.params[0], bias, activation_);
    return fn::reshape(rows, {shape[0], shape[1], out_});
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    const std::string y = onnx::linear(g, io.inputs[0], io.params[0], bias_ ? &io.params[1] : nullptr, io.name);
    return onnx::activation(g, y, activation_, io.name);  // a fused activation's layer passes through
  }
  bool fuse_activation(kestrel_activation act) override {
    activation_ = act;
    return true;
  }
  kestrel_activation activation() const override { return activation_; }

 private:
  int64_t out_;
  bool bias_;
  kestrel_activation activation_ = KESTREL_ACTIVATION_NONE;
};

class Conv2d : public Layer {
 public:
  explicit Conv2d(const Args& a)
      : out_(a.integer("out_channels")),
        window_(make_window(a.pair("kernel_size"), a.pair("stride"), a.pair("padding"), a.pair("dilation"))),
        bias_(a.boolean("bias")) {}
  Shape infer(const std::vector<Shape>& in) const override {
    need_rank("conv2d", in[0], 4, "(N, C, H, W)", "");
    return windowed_shape("conv2d", in[0], out_, window_);
  }
  std::vector<ParamSpec> params(const std::vector<Shape>& in) const override {
    // In double: the product may be past int64 here; the weight's size check refuses such a layer.
    const double fan_in = double(in[0][1]) * double(window_.kernel_h) * double(window_.kernel_w);
    double bound = 1.0 / std::sqrt(fan_in);
    std::vector<ParamSpec> p{{"weight", {out_, in[0][1], window_.kernel_h, window_.kernel_w}, bound}};
    if (bias_) p.push_back({"bias", {out_}, bound});
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    return fn::conv2d(in[0], c.params[0], bias_ ? c.params[1] : Var(), window_, activation_);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    std::vector<std::string> inputs{io.inputs[0], g.initializer(io.params[0])};
    if (bias_) inputs.push_back(g.initializer(io.params[1]));
    const std::string y = g.node("Conv", inputs, io.name, window_attributes(window_, true));
    return onnx::activation(g, y, activation_, io.name);  // a fused activation's layer passes through
  }
  // A relu after the convolution runs inside it (the fused op's epilogue, or right after the composed
  // product); a gelu stays a layer of its own.
  bool fuse_activation(kestrel_activation act) override {
    if (act != KESTREL_ACTIVATION_RELU) return false;
    activation_ = act;
    return true;
  }
  kestrel_activation activation() const override { return activation_; }

 private:
  int64_t out_;
  ops::Window window_;
  bool bias_;
  kestrel_activation activation_ = KESTREL_ACTIVATION_NONE;
};

class Pool2d : public Layer {
 public:
  Pool2d(const Args& a, bool max) : max_(max) {
    auto kernel = a.pair("kernel_size");
    auto stride = a.has("stride") ? a.pair("stride") : kernel;  // torch: stride defaults to kernel_size
    auto padding = a.pair("padding");
    auto dilation = max ? a.pair("dilation") : std::pair<int64_t, int64_t>{1, 1};
    window_ = make_window(kernel, stride, padding, dilation);
    if (padding.first * 2 > kernel.first || padding.second * 2 > kernel.second)
      shape_error(fmt::format("padding must be at most half the kernel size, got {}x{} for a {}x{} kernel",
                              padding.first, padding.second, kernel.first, kernel.second));
  }
  Shape infer(const std::vector<Shape>& in) const override {
    const char* type = max_ ? "maxpool2d" : "avgpool2d";
    need_rank(type, in[0], 4, "(N, C, H, W)", "");
    return windowed_shape(type, in[0], in[0][1], window_);
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override {
    return max_ ? fn::max_pool2d(in[0], window_) : fn::avg_pool2d(in[0], window_);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    std::vector<onnx::Attribute> a = window_attributes(window_, max_);
    if (!max_) a.push_back(onnx::attr("count_include_pad", 1));  // padding counts, as torch's default
    return g.node(max_ ? "MaxPool" : "AveragePool", {io.inputs[0]}, io.name, a);
  }

 private:
  bool max_;
  ops::Window window_;
};

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(const Args& a)
      : features_(a.integer("num_features")), eps_(a.number("eps")), momentum_(a.number("momentum")) {}
  Shape infer(const std::vector<Shape>& in) const override {
    need_rank("batchnorm2d", in[0], 4, "(N, C, H, W)", "");
    if (features_ && features_ != in[0][1])
      shape_error(fmt::format("batchnorm2d has num_features {} but its input {} has {} channels", features_,
                              batch_shape_str(in[0]), in[0][1]));
    return in[0];
  }
  std::vector<ParamSpec> params(const std::vector<Shape>& in) const override {
    return {{"weight", {in[0][1]}, 0, true, 1.0}, {"bias", {in[0][1]}, 0, true, 0.0}};
  }
  std::vector<BufferSpec> buffers(const std::vector<Shape>& in) const override {
    return {{"running_mean", {in[0][1]}, 0.0}, {"running_var", {in[0][1]}, 1.0}};
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    return fn::batch_norm2d(in[0], c.params[0], c.params[1], *c.buffers[0], *c.buffers[1], c.training, momentum_, eps_);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {  // with the running statistics
    return g.node("BatchNormalization",
                  {io.inputs[0], g.initializer(io.params[0]), g.initializer(io.params[1]), g.initializer(io.buffers[0]),
                   g.initializer(io.buffers[1])},
                  io.name, {onnx::attr("epsilon", float(eps_))});
  }

 private:
  int64_t features_;
  double eps_, momentum_;
};

// Token ids to learned vectors (torch.nn.Embedding): (N, ...) i64 -> (N, ..., embedding_dim).
class Embedding : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  // padding_idx as torch takes it: a row in [-num_embeddings, num_embeddings), negative counted from the
  // end; absent: none (-1 here).
  explicit Embedding(const Args& a)
      : vocabulary_(a.integer("num_embeddings")), width_(a.integer("embedding_dim")), padding_(-1) {
    if (!a.has("padding_idx")) return;
    const int64_t row = a.integer("padding_idx");
    if (row < -vocabulary_ || row >= vocabulary_)
      shape_error(fmt::format("embedding: padding_idx {} is not a row of its {} embeddings (give one in [{}, {}), "
                              "negative ones counted from the end, as torch.nn.Embedding takes it)",
                              row, vocabulary_, -vocabulary_, vocabulary_));
    padding_ = row < 0 ? row + vocabulary_ : row;
  }
  DType input_dtype() const override { return DType::i64; }
  int64_t token_limit() const override { return vocabulary_; }
  Shape infer(const std::vector<Shape>& in) const override {
    Shape out = in[0];
    out.push_back(width_);
    return out;
  }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    ParamSpec weight{"weight", {vocabulary_, width_}};
    weight.normal_std = 1.0;  // torch: N(0, 1), the padding row zeros
    weight.zero_row = padding_;
    return {weight};
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    c.embedded_output = fn::EmbeddedTokens{in[0].value(), c.params[0], padding_};
    return fn::embedding(in[0].value(), c.params[0], padding_);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return g.node("Gather", {g.initializer(io.params[0]), io.inputs[0]}, io.name, {onnx::attr("axis", 0)});
  }

 private:
  int64_t vocabulary_, width_, padding_;
};

// Normalises each sample (or sequence position) over its last axis (torch.nn.LayerNorm with an integer
// normalized_shape), with a learned scale and shift unless elementwise_affine is false.
class LayerNorm : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  explicit LayerNorm(const Args& a)
      : features_(a.integer("normalized_shape")), eps_(a.number("eps")), affine_(a.boolean("elementwise_affine")) {}
  Shape infer(const std::vector<Shape>& in) const override {
    if (in[0].size() < 2 || in[0].back() != features_)
      shape_error(fmt::format("layernorm normalises a last axis of {} features, but its input is {}", features_,
                              batch_shape_str(in[0])));
    return in[0];
  }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    if (!affine_) return {};
    return {{"weight", {features_}, 0, true, 1.0}, {"bias", {features_}, 0, true, 0.0}};
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    return affine_ ? fn::layer_norm(in[0], c.params[0], c.params[1], 1, eps_) : fn::layer_norm(in[0], Var(), Var(), 1, eps_);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return onnx::layer_norm(g, io.inputs[0], features_, affine_ ? &io.params[0] : nullptr,
                            affine_ ? &io.params[1] : nullptr, eps_, io.name);
  }

 private:
  int64_t features_;
  double eps_;
  bool affine_;
};

// torch.nn.Flatten: dims start_dim..end_dim (negative ones count from the end) become one. The defaults
// (1, -1) flatten all but the batch; (1, 2) turns an image (N, 1, 28, 28) into a sequence (N, 28, 28).
class Flatten : public Layer {
 public:
  explicit Flatten(const Args& a) : start_(a.integer("start_dim")), end_(a.integer("end_dim")) {}
  Shape infer(const std::vector<Shape>& in) const override { return flattened(in[0]); }
  Var forward(const std::vector<Var>& in, LayerContext&) const override {
    return fn::reshape(in[0], flattened(in[0].value().shape()));
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    Shape out = flattened(io.input_shapes[0]);
    out[0] = 0;  // the batch, whatever its size
    return onnx::reshape(g, io.inputs[0], out, io.name);
  }

 private:
  Shape flattened(const Shape& in) const {
    const auto rank = static_cast<int64_t>(in.size());
    const int64_t start = start_ < 0 ? start_ + rank : start_, end = end_ < 0 ? end_ + rank : end_;
    if (start < 1 || end >= rank || start > end)
      shape_error(fmt::format("flatten: dims {} to {} of {}: the batch (dim 0) stays, and start_dim may not pass end_dim",
                              start_, end_, batch_shape_str(in)));
    Shape out(in.begin(), in.begin() + start);
    int64_t merged = 1;
    for (int64_t d = start; d <= end; ++d) merged *= in[d];  // spec.cpp bounds shapes, so this cannot overflow
    out.push_back(merged);
    out.insert(out.end(), in.begin() + end + 1, in.end());
    return out;
  }
  int64_t start_, end_;
};

// relu, gelu, tanh, sigmoid: shape-preserving. After a fused linear they pass their input through.
class Activation : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  explicit Activation(std::string type) : type_(std::move(type)) {}
  Shape infer(const std::vector<Shape>& in) const override { return in[0]; }
  Var forward(const std::vector<Var>& in, LayerContext&) const override {
    if (fused_) return in[0];
    if (type_ == "relu") return fn::relu(in[0]);
    if (type_ == "gelu") return fn::gelu(in[0]);
    if (type_ == "tanh") return fn::tanh(in[0]);
    return fn::sigmoid(in[0]);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return fused_ ? io.inputs[0] : onnx::activation(g, io.inputs[0], type_, io.name);
  }
  kestrel_activation activation() const override {
    return type_ == "relu" ? KESTREL_ACTIVATION_RELU : type_ == "gelu" ? KESTREL_ACTIVATION_GELU : KESTREL_ACTIVATION_NONE;
  }
  void mark_fused() { fused_ = true; }

 private:
  std::string type_;
  bool fused_ = false;
};

class Dropout : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  explicit Dropout(const Args& a) : p_(a.number("p")) {}
  Shape infer(const std::vector<Shape>& in) const override { return in[0]; }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    if (!c.training || p_ == 0) return in[0];
    uint64_t offset = c.rng_offset;
    // Each element uses one Philox word; the next draw starts after this one's blocks.
    c.rng_offset += (static_cast<uint64_t>(in[0].value().numel()) + 3) / 4;
    return fn::dropout(in[0], p_, true, c.seed, offset);
  }
  std::string to_onnx(onnx::Graph&, const onnx::LayerIO& io) const override { return io.inputs[0]; }  // evaluation

 private:
  double p_;
};

class Softmax : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  explicit Softmax(const Args& a) : dim_(a.integer("dim")) {}
  Shape infer(const std::vector<Shape>& in) const override {
    int64_t rank = static_cast<int64_t>(in[0].size());
    if (dim_ != -1 && dim_ != rank - 1)
      shape_error(fmt::format("softmax supports only the last dimension (dim -1 or {}), got dim {}", rank - 1, dim_));
    return in[0];
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override { return fn::softmax(in[0]); }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return g.node("Softmax", {io.inputs[0]}, io.name, {onnx::attr("axis", -1)});
  }

 private:
  int64_t dim_;
};

class Add : public Layer {
 public:
  bool causal() const override { return true; }  // per position
  int arity() const override { return 2; }
  // Both inputs carry the batch first: broadcasting aligns their last axes, so inputs of different ranks
  // would pair one's batch axis with a per-sample axis of the other (each sample's sum reading the batch).
  Shape infer(const std::vector<Shape>& in) const override {
    if (in[0].size() != in[1].size())
      shape_error(fmt::format("add: inputs {} and {} have different ranks, so broadcasting would mix the batch with a "
                              "per-sample axis; give both the same rank (a per-sample axis of 1 broadcasts)",
                              batch_shape_str(in[0]), batch_shape_str(in[1])));
    try {
      return ops::broadcast_shapes(in[0], in[1]);
    } catch (const InvalidArgument&) {
      shape_error(fmt::format("add: inputs {} and {} cannot be broadcast together", batch_shape_str(in[0]),
                              batch_shape_str(in[1])));
    }
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override { return fn::add(in[0], in[1]); }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    return g.node("Add", {io.inputs[0], io.inputs[1]}, io.name);
  }
};

// ---- the registry ----

template <bool max>
std::unique_ptr<Layer> make_pool(const Args& a) {
  return std::make_unique<Pool2d>(a, max);
}
template <const char* type>
std::unique_ptr<Layer> make_activation(const Args&) {
  return std::make_unique<Activation>(type);
}
std::unique_ptr<Layer> make_add(const Args&) { return std::make_unique<Add>(); }

constexpr char kRelu[] = "relu", kGelu[] = "gelu", kTanh[] = "tanh", kSigmoid[] = "sigmoid";

}  // namespace

const std::vector<LayerKind>& layer_kinds() {
  static const std::vector<LayerKind> kinds = [] {
    std::vector<LayerKind> out = {
      {"linear", {integer("out_features", 1, nullptr), boolean("bias", true)}, make_layer<Linear>},
      {"conv2d",
       {integer("out_channels", 1, nullptr), required_pair("kernel_size", 1), pair("stride", 1, 1), pair("padding", 0, 0),
        pair("dilation", 1, 1), boolean("bias", true)},
       make_layer<Conv2d>},
      // A pool's stride defaults to its kernel size (no fallback here: the layer derives it).
      {"maxpool2d",
       {required_pair("kernel_size", 1), pair("stride", 1, nullptr), pair("padding", 0, 0), pair("dilation", 1, 1)},
       make_pool<true>},
      {"avgpool2d", {required_pair("kernel_size", 1), pair("stride", 1, nullptr), pair("padding", 0, 0)}, make_pool<false>},
      // num_features 0: taken from the input's channels.
      {"batchnorm2d",
       {integer("num_features", 0, 0), number("eps", 0, 1, 1e-5), number("momentum", 0, 1, 0.1)},
       make_layer<BatchNorm2d>},
      {"layernorm",
       {integer("normalized_shape", 1, nullptr), number("eps", 0, 1, 1e-5), boolean("elementwise_affine", true)},
       make_layer<LayerNorm>},
      // padding_idx absent: none; negative: counted from the end (torch's rule).
      {"embedding", {integer("num_embeddings", 1, nullptr), integer("embedding_dim", 1, nullptr),
                     optional_integer("padding_idx", -kIntMax, kIntMax)},
       make_layer<Embedding>},
      {"flatten",
       {integer("start_dim", -KESTREL_MAX_RANK, 1, KESTREL_MAX_RANK - 1),
        integer("end_dim", -KESTREL_MAX_RANK, -1, KESTREL_MAX_RANK - 1)},
       make_layer<Flatten>},
      {"relu", {}, make_activation<kRelu>},
      {"gelu", {}, make_activation<kGelu>},
      {"tanh", {}, make_activation<kTanh>},
      {"sigmoid", {}, make_activation<kSigmoid>},
      {"dropout", {number("p", 0, 1, 0.5, true)}, make_layer<Dropout>},
      {"softmax", {integer("dim", -KESTREL_MAX_RANK, -1, KESTREL_MAX_RANK - 1)}, make_layer<Softmax>},
      {"add", {}, make_add},
    };
    for (LayerKind& kind : sequence_layer_kinds()) out.push_back(std::move(kind));
    for (LayerKind& kind : attention_layer_kinds()) out.push_back(std::move(kind));
    return out;
  }();
  return kinds;
}

const LayerKind* find_layer_kind(const std::string& name) {
  for (const LayerKind& kind : layer_kinds())
    if (kind.name == name) return &kind;
  return nullptr;
}

std::string layer_kind_names() {
  std::vector<std::string> names;
  for (const LayerKind& kind : layer_kinds()) names.push_back(kind.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// Lets the loader mark an activation as folded into the preceding linear layer.
void mark_activation_fused(Layer& layer) {
  if (auto* activation = dynamic_cast<Activation*>(&layer)) activation->mark_fused();
}

}  // namespace kestrel
