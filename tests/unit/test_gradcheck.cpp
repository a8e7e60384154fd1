// Every layer and loss: the gradient from backward() against central finite differences, in double
// precision on the CPU backend, through the fused ops and through their composed fallbacks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/model.h"
#include "kestrel/optim.h"

namespace {

using kestrel::DType;
using kestrel::Tensor;
using kestrel::Var;
namespace fn = kestrel::fn;
using Function = std::function<Var(const std::vector<Var>&)>;

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

Tensor random_f64(const kestrel::Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(kestrel::shape_numel(shape));
  for (double& v : values) v = dist(rng);
  return Tensor::from_vector(values, shape, cpu());
}

// loss = sum(f(inputs) * weights) with fixed random weights, so every output element matters.
double loss_value(const Function& f, const std::vector<Tensor>& inputs, const Tensor& weights) {
  kestrel::NoGradGuard no_grad;
  std::vector<Var> vars;
  for (const Tensor& t : inputs) vars.emplace_back(t);
  Tensor out = f(vars).value();
  auto o = out.to_doubles(), w = weights.to_doubles();
  double total = 0;
  for (size_t i = 0; i < o.size(); ++i) total += o[i] * w[i];
  return total;
}

void gradcheck(const Function& f, const std::vector<Tensor>& inputs, double tol = 1e-6) {
  std::vector<Var> vars;
  for (const Tensor& t : inputs) vars.emplace_back(t.clone(), true);
  Var out = f(vars);
  Tensor weights = random_f64(out.value().shape(), 99);
  kestrel::backward(fn::sum(fn::mul(out, Var(weights))));
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(vars[i].grad().defined()) << "no gradient reached input " << i;
    auto analytic = vars[i].grad().to_doubles();
    auto base = inputs[i].to_doubles();
    for (size_t j = 0; j < base.size(); ++j) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      auto shifted = base;
      shifted[j] = base[j] + eps;
      plus[i] = Tensor::from_vector(shifted, inputs[i].shape(), cpu());
      shifted[j] = base[j] - eps;
      minus[i] = Tensor::from_vector(shifted, inputs[i].shape(), cpu());
      double numeric = (loss_value(f, plus, weights) - loss_value(f, minus, weights)) / (2 * eps);
      ASSERT_NEAR(analytic[j], numeric, tol + 1e-5 * std::abs(numeric)) << "input " << i << " element " << j;
    }
  }
}

kestrel::ops::Window window(int k, int s, int p, int d = 1) {
  kestrel::ops::Window w;
  w.kernel_h = w.kernel_w = k;
  w.stride_h = w.stride_w = s;
  w.pad_h = w.pad_w = p;
  w.dilation_h = w.dilation_w = d;
  return w;
}

class Gradcheck : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { kestrel::ops::set_fused_ops_enabled(GetParam()); }
  void TearDown() override { kestrel::ops::set_fused_ops_enabled(true); }
};

TEST_P(Gradcheck, Linear) {
  for (auto act : {KESTREL_ACTIVATION_NONE, KESTREL_ACTIVATION_RELU, KESTREL_ACTIVATION_GELU}) {
    gradcheck([act](auto& v) { return fn::linear(v[0], v[1], v[2], act); },
              {random_f64({4, 3}, 1), random_f64({5, 3}, 2), random_f64({5}, 3)});
  }
  gradcheck([](auto& v) { return fn::linear(v[0], v[1], Var()); }, {random_f64({4, 3}, 1), random_f64({2, 3}, 2)});
}

TEST_P(Gradcheck, Conv2d) {
  gradcheck([](auto& v) { return fn::conv2d(v[0], v[1], v[2], window(3, 1, 1)); },
            {random_f64({2, 2, 5, 4}, 4), random_f64({3, 2, 3, 3}, 5), random_f64({3}, 6)});
  gradcheck([](auto& v) { return fn::conv2d(v[0], v[1], Var(), window(2, 2, 0, 1)); },
            {random_f64({1, 3, 6, 6}, 7), random_f64({2, 3, 2, 2}, 8)});
  gradcheck([](auto& v) { return fn::conv2d(v[0], v[1], v[2], window(2, 1, 1, 2)); },
            {random_f64({1, 1, 5, 5}, 9), random_f64({2, 1, 2, 2}, 10), random_f64({2}, 11)});
  // With the ReLU fused in (the backward ops then mask the gradient themselves), and a 1x1 kernel.
  gradcheck([](auto& v) { return fn::conv2d(v[0], v[1], v[2], window(3, 1, 1), KESTREL_ACTIVATION_RELU); },
            {random_f64({2, 2, 5, 4}, 12), random_f64({3, 2, 3, 3}, 13), random_f64({3}, 14)});
  gradcheck([](auto& v) { return fn::conv2d(v[0], v[1], v[2], window(1, 1, 0), KESTREL_ACTIVATION_RELU); },
            {random_f64({2, 3, 4, 4}, 15), random_f64({2, 3, 1, 1}, 16), random_f64({2}, 17)});
}

TEST_P(Gradcheck, Pooling) {
  // Distinct values keep the max away from ties, where the derivative is not defined.
  gradcheck([](auto& v) { return fn::max_pool2d(v[0], window(2, 2, 0)); }, {random_f64({2, 2, 4, 6}, 12)});
  gradcheck([](auto& v) { return fn::max_pool2d(v[0], window(3, 2, 1)); }, {random_f64({1, 2, 5, 5}, 13)});
  gradcheck([](auto& v) { return fn::avg_pool2d(v[0], window(3, 2, 1)); }, {random_f64({1, 2, 5, 5}, 14)});
}

TEST_P(Gradcheck, BatchNorm2d) {
  for (bool training : {true, false}) {
    Tensor mean = random_f64({3}, 15), var = random_f64({3}, 16, 0.5, 2);
    gradcheck(
        [&](auto& v) {
          Tensor m = mean.clone(), s = var.clone();  // finite differences must not see updated statistics
          return fn::batch_norm2d(v[0], v[1], v[2], m, s, training, 0.1, 1e-5);
        },
        {random_f64({4, 3, 2, 3}, 17), random_f64({3}, 18), random_f64({3}, 19)}, 1e-5);
  }
}

TEST_P(Gradcheck, LayerNorm) {
  // Over the last axis of a sequence (N, T, D), with and without the affine parameters.
  gradcheck([](auto& v) { return fn::layer_norm(v[0], v[1], v[2], 1, 1e-5); },
            {random_f64({2, 3, 5}, 40), random_f64({5}, 41), random_f64({5}, 42)}, 1e-5);
  gradcheck([](auto& v) { return fn::layer_norm(v[0], Var(), Var(), 1, 1e-5); }, {random_f64({4, 6}, 43)}, 1e-5);
  // A weight without a bias (a Transformer block with bias false).
  gradcheck([](auto& v) { return fn::layer_norm(v[0], v[1], Var(), 1, 1e-5); },
            {random_f64({2, 3, 5}, 47), random_f64({5}, 48)}, 1e-5);
  // Over two axes.
  gradcheck([](auto& v) { return fn::layer_norm(v[0], v[1], v[2], 2, 1e-5); },
            {random_f64({3, 2, 4}, 44), random_f64({2, 4}, 45), random_f64({2, 4}, 46)}, 1e-5);
}

TEST_P(Gradcheck, Embedding) {
  // Repeated ids accumulate; the padding row (2) gets no gradient.
  Tensor tokens = Tensor::from_vector<int64_t>({1, 2, 1, 0, 4, 2}, {2, 3}, cpu());
  gradcheck([&](auto& v) { return fn::embedding(tokens, v[0]); }, {random_f64({5, 3}, 47)});
  Var table(random_f64({5, 3}, 48), true);
  kestrel::backward(fn::sum(fn::embedding(tokens, table, 2)));
  auto grad = table.grad().to_doubles();
  const double want[5] = {1, 2, 0, 0, 1};  // uses of each row
  for (int row = 0; row < 5; ++row)
    for (int d = 0; d < 3; ++d) EXPECT_EQ(grad[row * 3 + d], want[row]) << "row " << row;
}

TEST_P(Gradcheck, SlicingAndJoiningSequences) {
  // Pieces used more than once and pieces left unused: their gradients add into one buffer, zeros where
  // nothing flowed.
  gradcheck([](auto& v) {
    std::vector<Var> steps = fn::unbind(v[0], 1);  // 4 x (2, 3)
    return fn::stack({fn::mul(steps[0], steps[3]), steps[1], steps[0]}, 1);
  }, {random_f64({2, 4, 3}, 60)});
  gradcheck([](auto& v) {
    std::vector<Var> parts = fn::chunk(v[0], -1, 3);  // 3 x (2, 4, 2)
    return fn::concat({fn::sigmoid(parts[2]), parts[0], v[1]}, 2);
  }, {random_f64({2, 4, 6}, 61), random_f64({2, 4, 1}, 62)});
  gradcheck([](auto& v) { return fn::select(v[0], 1, 2); }, {random_f64({2, 3, 4}, 63)});
  gradcheck([](auto& v) { return fn::mean_over(v[0], 1); }, {random_f64({2, 5, 3}, 64)});
}

// Each recurrent cell in both directions over (N, T, F) = (2, 4, 3) with H = 2; the weights are inputs
// too, so every parameter's gradient is checked through every step.
TEST_P(Gradcheck, RecurrentLayers) {
  using Cell = kestrel::fn::RecurrentCell;
  for (auto [cell, gates] : {std::pair{Cell::rnn_tanh, 1}, {Cell::rnn_relu, 1}, {Cell::lstm, 4}, {Cell::gru, 3}})
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(fmt::format("cell {} reverse {}", static_cast<int>(cell), reverse));
      const int64_t g = gates * 2;
      gradcheck([cell = cell, reverse](auto& v) {
        return fn::recurrent_layer(v[0], {v[1], v[2], v[3], v[4]}, cell, reverse);
      }, {random_f64({2, 4, 3}, 65), random_f64({g, 3}, 66), random_f64({g, 2}, 67), random_f64({g}, 68),
          random_f64({g}, 69)}, 1e-5);
    }
  gradcheck([](auto& v) { return fn::recurrent_layer(v[0], {v[1], v[2], Var(), Var()}, Cell::lstm, false); },
            {random_f64({1, 3, 2}, 70), random_f64({8, 2}, 71), random_f64({8, 2}, 72)}, 1e-5);
  gradcheck([](auto& v) { return fn::recurrent_layer(v[0], {v[1], v[2], Var(), Var()}, Cell::gru, true); },
            {random_f64({1, 3, 2}, 73), random_f64({6, 2}, 74), random_f64({6, 2}, 75)}, 1e-5);
}

TEST_P(Gradcheck, Attention) {
  for (bool causal : {false, true}) {
    fn::AttentionOptions o;
    o.causal = causal;
    // q, k, v of 2 batch entries, 3 positions, depth 4; then 2 queries continuing 2 cached positions.
    gradcheck([o](auto& v) { return fn::scaled_dot_product_attention(v[0], v[1], v[2], o); },
              {random_f64({2, 3, 4}, 80), random_f64({2, 3, 4}, 81), random_f64({2, 3, 4}, 82)}, 1e-5);
    gradcheck([o](auto& v) { return fn::scaled_dot_product_attention(v[0], v[1], v[2], o); },
              {random_f64({2, 2, 4}, 83), random_f64({2, 4, 4}, 84), random_f64({2, 4, 4}, 85)}, 1e-5);
  }
  // Two heads of width 2 over E = 4, self- and cross-attention, every projection's parameters checked.
  fn::AttentionOptions causal;
  causal.causal = true;
  gradcheck([causal](auto& v) { return fn::multihead_attention(v[0], v[0], {v[1], v[2], v[3], v[4]}, 2, causal); },
            {random_f64({2, 3, 4}, 86), random_f64({12, 4}, 87), random_f64({12}, 88), random_f64({4, 4}, 89),
             random_f64({4}, 90)}, 1e-5);
  gradcheck([](auto& v) { return fn::multihead_attention(v[0], v[1], {v[2], Var(), v[3], Var()}, 2, {}); },
            {random_f64({1, 2, 4}, 91), random_f64({1, 5, 4}, 92), random_f64({12, 4}, 93), random_f64({4, 4}, 94)}, 1e-5);
  // A key-padding mask (N = 2, 5 keys): sample 0's first two keys and sample 1's last are padding, so the
  // weights and their gradients flow through the remaining keys of each sample's two heads.
  fn::AttentionOptions padded;
  padded.key_padding = Tensor::from_vector<double>({1, 1, 0, 0, 0, 0, 0, 0, 0, 1}, {2, 5}, cpu());
  gradcheck([padded](auto& v) { return fn::multihead_attention(v[0], v[1], {v[2], v[3], v[4], Var()}, 2, padded); },
            {random_f64({2, 3, 4}, 97), random_f64({2, 5, 4}, 98), random_f64({12, 4}, 100), random_f64({12}, 101),
             random_f64({4, 4}, 102)}, 1e-5);
  gradcheck([](auto& v) { return fn::permute(v[0], {2, 0, 1}); }, {random_f64({2, 3, 4}, 95)});
  gradcheck([](auto& v) { return fn::slice(v[0], 1, 1, 3); }, {random_f64({2, 4, 3}, 96)});
}

TEST_P(Gradcheck, Activations) {
  Tensor x = random_f64({3, 7}, 20, -2, 2);
  gradcheck([](auto& v) { return fn::relu(v[0]); }, {x});
  gradcheck([](auto& v) { return fn::gelu(v[0]); }, {x});
  gradcheck([](auto& v) { return fn::tanh(v[0]); }, {x});
  gradcheck([](auto& v) { return fn::sigmoid(v[0]); }, {x});
  gradcheck([](auto& v) { return fn::softmax(v[0]); }, {x});
  gradcheck([](auto& v) { return fn::log_softmax(v[0]); }, {x});
  gradcheck([](auto& v) { return fn::dropout(v[0], 0.3, true, 1234, 0); }, {x});
}

TEST_P(Gradcheck, ArithmeticAndShapes) {
  gradcheck([](auto& v) { return fn::add(v[0], v[1]); }, {random_f64({3, 4}, 21), random_f64({4}, 22)});
  gradcheck([](auto& v) { return fn::sub(v[0], v[1]); }, {random_f64({3, 1}, 23), random_f64({3, 4}, 24)});
  gradcheck([](auto& v) { return fn::mul(v[0], v[1]); }, {random_f64({2, 3, 4}, 25), random_f64({3, 1}, 26)});
  gradcheck([](auto& v) { return fn::flatten(v[0]); }, {random_f64({2, 3, 2}, 27)});
  gradcheck([](auto& v) { return fn::mean(v[0]); }, {random_f64({2, 3}, 28)});
  // A value used twice: gradients from both uses add up.
  gradcheck([](auto& v) { return fn::mul(fn::tanh(v[0]), fn::add(v[0], v[0])); }, {random_f64({5}, 29)});
}

TEST_P(Gradcheck, Losses) {
  Tensor labels = Tensor::from_vector<int64_t>({0, 3, 2, 3, 1}, {5}, cpu());
  gradcheck([&](auto& v) { return fn::cross_entropy(v[0], labels); }, {random_f64({5, 4}, 30, -3, 3)});
  // Per position: (N, T, C) logits, (N, T) labels; with ignore_index the ignored positions get no
  // gradient and the mean is over the others.
  Tensor positions = Tensor::from_vector<int64_t>({0, 3, 2, 1, 1, 3}, {2, 3}, cpu());
  gradcheck([&](auto& v) { return fn::cross_entropy(v[0], positions); }, {random_f64({2, 3, 4}, 33, -3, 3)});
  gradcheck([&](auto& v) { return fn::cross_entropy(v[0], positions, 3); }, {random_f64({2, 3, 4}, 34, -3, 3)});
  {
    Tensor x = random_f64({2, 3, 4}, 35, -3, 3);
    Tensor kept_labels = Tensor::from_vector<int64_t>({0, 2, 1, 1}, {4}, cpu());  // the positions not labelled 3
    std::vector<double> all = x.to_doubles(), kept;
    for (int row : {0, 2, 3, 4}) kept.insert(kept.end(), all.begin() + row * 4, all.begin() + row * 4 + 4);
    kestrel::NoGradGuard no_grad;
    const double with_ignore = fn::cross_entropy(Var(x), positions, 3).value().to_doubles()[0];
    const double on_kept = fn::cross_entropy(Var(Tensor::from_vector(kept, {4, 4}, cpu())), kept_labels).value().to_doubles()[0];
    EXPECT_NEAR(with_ignore, on_kept, 1e-12);
  }
  {
    // Every position ignored: the loss is 0 / 0 (NaN, as torch's) but the gradient is zero, not NaN
    // (found by review: an all-padding micro-batch poisoned the whole step's gradients).
    Var logits(random_f64({2, 3, 4}, 36, -3, 3), true);
    Tensor all_ignored = Tensor::full({2, 3}, 3.0, DType::i64, cpu());
    Var loss = fn::cross_entropy(logits, all_ignored, 3);
    EXPECT_TRUE(std::isnan(loss.value().to_doubles()[0]));
    kestrel::backward(loss, Tensor::full({}, 1.0, loss.value().dtype(), cpu()));
    for (double g : logits.grad().to_doubles()) EXPECT_EQ(g, 0.0);
  }
  Tensor target = random_f64({4, 2}, 31);
  gradcheck([&](auto& v) { return fn::mse_loss(v[0], target); }, {random_f64({4, 2}, 32)});
}

INSTANTIATE_TEST_SUITE_P(FusedAndComposed, Gradcheck, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "fused" : "composed"; });

// reshape and cross-entropy on rows a stride apart (a slice of wider rows, as a padded product leaves its
// logits) and on repeated rows (expand's stride 0): the values and gradients of the contiguous copies.
TEST(Autograd, ReshapeAndCrossEntropyTakeRowsAsTheyLie) {
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 0, 2, 4, 3, 1}, {2, 3}, cpu());
  const Tensor wide = random_f64({2, 3, 8}, 5);
  const Tensor narrow = random_f64({2, 1, 5}, 6);
  for (const Tensor& logits : {wide.slice(2, 0, 5), narrow.expand({2, 3, 5})}) {
    SCOPED_TRACE(logits.describe());
    auto run = [&](const Tensor& given) {
      Var x(given, true);
      Var rows = fn::reshape(x, {6, 5});
      EXPECT_EQ(rows.value().to_doubles(), given.contiguous().view({6, 5}).to_doubles());
      kestrel::backward(fn::cross_entropy(fn::reshape(rows, {2, 3, 5}), labels));
      return x.grad().to_doubles();
    };
    EXPECT_EQ(run(logits), run(logits.contiguous()));
  }
}

TEST(Autograd, ErrorsAreClear) {
  Var x(random_f64({2, 2}, 33));
  EXPECT_THROW(kestrel::backward(fn::sum(x)), kestrel::InvalidArgument);  // nothing requires a gradient
  Var y(random_f64({2, 2}, 34), true);
  EXPECT_THROW(kestrel::backward(fn::relu(y)), kestrel::InvalidArgument);  // not a scalar, no seed
  EXPECT_THROW(fn::linear(y, Var(random_f64({3, 5}, 35)), Var()), kestrel::InvalidArgument);
}

// A model's gradients: backward adds into them; after zero_grad(lazy) the next pass overwrites them
// instead, and settle_gradients() zeroes those that no pass reached.
// The first pass after a lazy zero writes each gradient (the fused layer norm's and convolution's
// weight and bias gradients and the linear layers' bias sums straight into the gradient storage), later
// passes add to it, and gradients no pass reached read 0.
TEST(Autograd, ModelGradientsAddOrOverwriteAfterALazyZero) {
  const std::pair<const char*, kestrel::Shape> models[] = {
      {R"({"name": "mlp", "input": {"shape": [3]},
          "layers": [{"type": "linear", "out_features": 4}, {"type": "layernorm", "normalized_shape": 4},
                     {"type": "relu"}, {"type": "linear", "out_features": 2}]})", {5, 3}},
      {R"({"name": "cnn", "input": {"shape": [2, 5, 5]},
          "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": 3}, {"type": "relu"}, {"type": "flatten"},
                     {"type": "linear", "out_features": 2}]})", {5, 2, 5, 5}}};
  for (const auto& [text, input_shape] : models) {
    kestrel::Model model(kestrel::ModelSpec::parse(text, "inline"), cpu(), 1);
    Tensor x = random_f64(input_shape, 36).to(DType::f32), target = random_f64({5, 2}, 37).to(DType::f32);  // (N, ...), (N, out)
    auto gradients_after_a_pass = [&] {
      uint64_t rng_offset = 0;
      kestrel::backward(fn::mse_loss(model.forward(x, true, 0, rng_offset), target));
      return model.flat_gradients().to_vector<float>();
    };
    auto expect_scaled = [&](const std::vector<float>& got, const std::vector<float>& base, float factor) {
      ASSERT_EQ(got.size(), base.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], factor * base[i], 1e-6 * (1 + std::abs(base[i]))) << text << " parameter " << i;
    };
    model.zero_grad();
    std::vector<float> once = gradients_after_a_pass();
    expect_scaled(gradients_after_a_pass(), once, 2);  // added
    model.zero_grad(/*lazy=*/true);
    model.flat_gradients().copy_from(Tensor::full(model.flat_gradients().shape(), 99.0, DType::f32, cpu()));  // old
    gradients_after_a_pass();
    model.settle_gradients();
    expect_scaled(model.flat_gradients().to_vector<float>(), once, 1);  // overwritten
    gradients_after_a_pass();
    expect_scaled(model.flat_gradients().to_vector<float>(), once, 2);  // then added
    model.zero_grad(/*lazy=*/true);
    model.settle_gradients();  // no pass reached them
    expect_scaled(model.flat_gradients().to_vector<float>(), once, 0);
  }
}

// Token ids through an embedding, a layer norm per position and a linear layer over the last axis:
// (N, T) -> (N, T, V), initialised as torch (embedding rows N(0, 1), the padding row zero), with a
// gradient reaching every parameter.
TEST(Autograd, ASequenceModelEmbedsNormalisesAndProjectsEachPosition) {
  kestrel::ModelSpec spec = kestrel::ModelSpec::parse(R"({"input": {"shape": [4], "dtype": "i64"}, "layers": [
      {"type": "embedding", "num_embeddings": 300, "embedding_dim": 8, "padding_idx": 0},
      {"type": "layernorm", "normalized_shape": 8}, {"type": "linear", "out_features": 300}]})", "inline");
  kestrel::Model model(spec, cpu(), 7);
  auto table = model.parameters()[0].var.value().to_doubles();  // (300, 8)
  double sum = 0, squares = 0;
  for (size_t i = 8; i < table.size(); ++i) sum += table[i], squares += table[i] * table[i];
  const double n = double(table.size() - 8), mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.1);
  EXPECT_NEAR(std::sqrt(squares / n - mean * mean), 1.0, 0.1);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(table[d], 0.0) << "the padding row starts at zero";

  uint64_t rng_offset = 0;
  Tensor tokens = Tensor::from_vector<int64_t>({5, 0, 299, 5, 1, 2, 3, 0}, {2, 4}, cpu());
  Var logits = model.forward(tokens, true, 0, rng_offset);
  EXPECT_EQ(logits.value().shape(), (kestrel::Shape{2, 4, 300}));
  kestrel::backward(fn::sum(fn::mul(logits, Var(random_f64({2, 4, 300}, 50).to(DType::f32)))));
  model.settle_gradients();
  auto grads = model.flat_gradients().to_vector<float>();  // the parameters' gradients, in their order
  size_t offset = 0;
  for (const auto& p : model.parameters()) {
    const auto n = static_cast<size_t>(p.var.value().numel());
    double magnitude = 0;
    for (size_t i = offset; i < offset + n; ++i) magnitude += std::abs(grads[i]);
    EXPECT_GT(magnitude, 0) << p.name << " got no gradient";
    offset += n;
  }
  EXPECT_EQ(offset, grads.size());

  // padding_idx counted from the end, as torch.nn.Embedding takes it: -1 is the last row (found by
  // review: -1 meant "none" here, so a model written for torch lost its padding row).
  kestrel::Model from_end(kestrel::ModelSpec::parse(R"({"input": {"shape": [4], "dtype": "i64"}, "layers": [
      {"type": "embedding", "num_embeddings": 300, "embedding_dim": 8, "padding_idx": -1}]})", "inline"),
                          cpu(), 7);
  const auto last_rows = from_end.parameters()[0].var.value().to_doubles();
  for (int d = 0; d < 8; ++d) EXPECT_EQ(last_rows[299 * 8 + d], 0.0) << "row 299 is the padding row";
}

// A model states what its input holds; a tensor of another dtype is refused with both named.
TEST(Autograd, AModelRefusesInputOfAnotherDtype) {
  kestrel::ModelSpec spec = kestrel::ModelSpec::parse(
      R"({"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 2}]})", "inline");
  EXPECT_EQ(spec.input_dtype(), DType::f32);
  kestrel::Model model(spec, cpu(), 1);
  uint64_t rng_offset = 0;
  Tensor tokens = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3}, cpu());  // (N, 3) i64
  try {
    model.forward(tokens, false, 0, rng_offset);
    FAIL() << "an i64 input was accepted by an f32 model";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("takes f32 input"), std::string::npos) << e.what();
  }
  // Token ids go only to layers that read them (an embedding).
  try {
    kestrel::ModelSpec::parse(R"({"input": {"shape": [8], "dtype": "i64"}, "layers": [{"type": "linear", "out_features": 2}]})",
                              "tokens.json");
    FAIL() << "a linear layer was given token ids";
  } catch (const kestrel::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("tokens.json: /layers/0: linear reads f32 values, but its input 0 holds i64 token ids"),
              std::string::npos)
        << e.what();
  }
}

// A tape as long as a model with a million layers is released without a stack frame per node (it used
// to overflow the stack).
TEST(Autograd, AMillionNodeTapeIsReleasedIteratively) {
  Tensor one = Tensor::from_vector<float>({1}, {1}, cpu());
  Var x(one, true);
  for (int i = 0; i < 1000000; ++i) x = kestrel::make_var(one, {x}, "chain", [](const Tensor&) {});
  x = Var();  // releases the chain
  SUCCEED();
}

// The engine's parameter blocks are what the plugin expects, so the CPU backend runs every update kind
// as its one fused launch (a block sized as another struct would be refused and silently composed).
TEST(Autograd, EveryOptimizerKindRunsFusedOnTheCpu) {
  for (kestrel::OptimizerKind kind : {kestrel::OptimizerKind::sgd, kestrel::OptimizerKind::adam, kestrel::OptimizerKind::adamw}) {
    kestrel::OptimizerConfig config;
    config.type = kind;
    config.momentum = 0.9;
    Tensor params = random_f64({8}, 40).to(DType::f32), grads = random_f64({8}, 41).to(DType::f32);  // (8), (8)
    kestrel::Optimizer optimizer(config, params, grads);
    optimizer.step(0.01);
    EXPECT_TRUE(optimizer.last_step_fused()) << kestrel::optimizer_kind_names[int(kind)];
  }
}

}  // namespace
