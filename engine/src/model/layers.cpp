// The layer kinds a model file may use, named and parameterised as in torch.nn.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "layer.h"

namespace kestrel {

namespace {

[[noreturn]] void shape_error(const std::string& message) { throw ShapeError(message); }

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
  explicit Linear(Args& a) : out_(a.required_integer("out_features", 1)), bias_(a.boolean("bias", true)) {}
  Shape infer(const std::vector<Shape>& in) const override {
    need_rank("linear", in[0], 2, "(N, features)", in[0].size() > 2 ? "; add a flatten layer before it" : "");
    return {in[0][0], out_};
  }
  std::vector<ParamSpec> params(const std::vector<Shape>& in) const override {
    double bound = 1.0 / std::sqrt(double(in[0][1]));  // kaiming_uniform_(a=sqrt(5)) and the bias rule of torch
    std::vector<ParamSpec> p{{"weight", {out_, in[0][1]}, bound}};
    if (bias_) p.push_back({"bias", {out_}, bound});
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    return fn::linear(in[0], c.params[0], bias_ ? c.params[1] : Var(), activation_);
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
  explicit Conv2d(Args& a)
      : out_(a.required_integer("out_channels", 1)),
        window_(make_window(a.pair("kernel_size", {1, 1}, 1, true), a.pair("stride", {1, 1}, 1),
                            a.pair("padding", {0, 0}, 0), a.pair("dilation", {1, 1}, 1))),
        bias_(a.boolean("bias", true)) {}
  Shape infer(const std::vector<Shape>& in) const override {
    need_rank("conv2d", in[0], 4, "(N, C, H, W)", "");
    return windowed_shape("conv2d", in[0], out_, window_);
  }
  std::vector<ParamSpec> params(const std::vector<Shape>& in) const override {
    int64_t fan_in = in[0][1] * window_.kernel_h * window_.kernel_w;
    double bound = 1.0 / std::sqrt(double(fan_in));
    std::vector<ParamSpec> p{{"weight", {out_, in[0][1], window_.kernel_h, window_.kernel_w}, bound}};
    if (bias_) p.push_back({"bias", {out_}, bound});
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    return fn::conv2d(in[0], c.params[0], bias_ ? c.params[1] : Var(), window_);
  }

 private:
  int64_t out_;
  ops::Window window_;
  bool bias_;
};

class Pool2d : public Layer {
 public:
  Pool2d(Args& a, bool max) : max_(max) {
    auto kernel = a.pair("kernel_size", {1, 1}, 1, true);
    auto stride = a.pair("stride", kernel, 1);  // torch: stride defaults to kernel_size
    auto padding = a.pair("padding", {0, 0}, 0);
    auto dilation = max ? a.pair("dilation", {1, 1}, 1) : std::pair<int64_t, int64_t>{1, 1};
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

 private:
  bool max_;
  ops::Window window_;
};

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(Args& a)
      : features_(a.integer("num_features", 0, 0)), eps_(a.number("eps", 1e-5, 0, 1)),
        momentum_(a.number("momentum", 0.1, 0, 1)) {}
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

 private:
  int64_t features_;
  double eps_, momentum_;
};

class Flatten : public Layer {
 public:
  Shape infer(const std::vector<Shape>& in) const override {
    if (in[0].size() < 2) shape_error(fmt::format("flatten expects (N, ...), got {}", batch_shape_str(in[0])));
    int64_t features = 1;
    for (size_t d = 1; d < in[0].size(); ++d) features *= in[0][d];
    return {in[0][0], features};
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override { return fn::flatten(in[0]); }
};

// relu, gelu, tanh, sigmoid: shape-preserving. After a fused linear they pass their input through.
class Activation : public Layer {
 public:
  explicit Activation(std::string type) : type_(std::move(type)) {}
  Shape infer(const std::vector<Shape>& in) const override { return in[0]; }
  Var forward(const std::vector<Var>& in, LayerContext&) const override {
    if (fused_) return in[0];
    if (type_ == "relu") return fn::relu(in[0]);
    if (type_ == "gelu") return fn::gelu(in[0]);
    if (type_ == "tanh") return fn::tanh(in[0]);
    return fn::sigmoid(in[0]);
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
  explicit Dropout(Args& a) : p_(a.number("p", 0.5, 0, 0.999)) {}
  Shape infer(const std::vector<Shape>& in) const override { return in[0]; }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    if (!c.training || p_ == 0) return in[0];
    uint64_t offset = c.rng_offset;
    // Each element uses one Philox word; the next draw starts after this one's blocks.
    c.rng_offset += (static_cast<uint64_t>(in[0].value().numel()) + 3) / 4;
    return fn::dropout(in[0], p_, true, c.seed, offset);
  }

 private:
  double p_;
};

class Softmax : public Layer {
 public:
  explicit Softmax(Args& a) : dim_(a.integer("dim", -1, -8)) {}
  Shape infer(const std::vector<Shape>& in) const override {
    int64_t rank = static_cast<int64_t>(in[0].size());
    if (dim_ != -1 && dim_ != rank - 1)
      shape_error(fmt::format("softmax supports only the last dimension (dim -1 or {}), got dim {}", rank - 1, dim_));
    return in[0];
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override { return fn::softmax(in[0]); }

 private:
  int64_t dim_;
};

class Add : public Layer {
 public:
  int arity() const override { return 2; }
  Shape infer(const std::vector<Shape>& in) const override {
    try {
      return ops::broadcast_shapes(in[0], in[1]);
    } catch (const InvalidArgument&) {
      shape_error(fmt::format("add: inputs {} and {} cannot be broadcast together", batch_shape_str(in[0]),
                              batch_shape_str(in[1])));
    }
  }
  Var forward(const std::vector<Var>& in, LayerContext&) const override { return fn::add(in[0], in[1]); }
};

}  // namespace

const std::vector<std::string>& layer_types() {
  static const std::vector<std::string> types = {"linear",  "conv2d", "maxpool2d", "avgpool2d", "batchnorm2d",
                                                 "flatten", "relu",   "gelu",      "tanh",      "sigmoid",
                                                 "dropout", "softmax", "add"};
  return types;
}

std::unique_ptr<Layer> make_layer(const std::string& type, Args& args) {
  std::unique_ptr<Layer> layer;
  if (type == "linear") layer = std::make_unique<Linear>(args);
  else if (type == "conv2d") layer = std::make_unique<Conv2d>(args);
  else if (type == "maxpool2d") layer = std::make_unique<Pool2d>(args, true);
  else if (type == "avgpool2d") layer = std::make_unique<Pool2d>(args, false);
  else if (type == "batchnorm2d") layer = std::make_unique<BatchNorm2d>(args);
  else if (type == "flatten") layer = std::make_unique<Flatten>();
  else if (type == "relu" || type == "gelu" || type == "tanh" || type == "sigmoid") layer = std::make_unique<Activation>(type);
  else if (type == "dropout") layer = std::make_unique<Dropout>(args);
  else if (type == "softmax") layer = std::make_unique<Softmax>(args);
  else if (type == "add") layer = std::make_unique<Add>();
  args.finish();
  return layer;
}

// Lets the loader mark an activation as folded into the preceding linear layer.
void mark_activation_fused(Layer& layer) {
  if (auto* activation = dynamic_cast<Activation*>(&layer)) activation->mark_fused();
}

}  // namespace kestrel
