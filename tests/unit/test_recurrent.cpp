// The recurrent layers against a plain double-precision reference of torch's equations (RNN, LSTM and
// GRU cells as torch.nn documents them), and as model layers: torch's parameter names and shapes,
// stacking, both directions, and the errors a model file gets.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/model.h"
#include "kestrel/ops.h"

namespace {

using kestrel::Shape;
using kestrel::Tensor;
using kestrel::Var;
namespace fn = kestrel::fn;
using Cell = fn::RecurrentCell;
using Matrix = std::vector<double>;  // row-major

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

Matrix random_values(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  Matrix values(count);
  for (double& v : values) v = dist(rng);
  return values;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// torch.nn's equations, one sample and one step at a time. x: (T, F), weights as torch; returns (T, H).
Matrix reference(Cell cell, const Matrix& x, int64_t steps, int64_t features, int64_t hidden, const Matrix& w_ih,
                 const Matrix& w_hh, const Matrix& b_ih, const Matrix& b_hh, bool reverse) {
  const int64_t gates = w_ih.size() / features;
  Matrix out(steps * hidden), h(hidden, 0.0), c(hidden, 0.0);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    Matrix xi(gates), hi(gates);  // W_ih x_t + b_ih and W_hh h + b_hh, kept apart for the GRU
    for (int64_t g = 0; g < gates; ++g) {
      xi[g] = b_ih[g], hi[g] = b_hh[g];
      for (int64_t f = 0; f < features; ++f) xi[g] += w_ih[g * features + f] * x[t * features + f];
      for (int64_t j = 0; j < hidden; ++j) hi[g] += w_hh[g * hidden + j] * h[j];
    }
    Matrix next(hidden);
    for (int64_t j = 0; j < hidden; ++j) {
      auto at = [&](const Matrix& m, int gate) { return m[gate * hidden + j]; };
      switch (cell) {
        case Cell::rnn_tanh: next[j] = std::tanh(xi[j] + hi[j]); break;
        case Cell::rnn_relu: next[j] = std::max(0.0, xi[j] + hi[j]); break;
        case Cell::lstm: {
          double i = sigmoid(at(xi, 0) + at(hi, 0)), f = sigmoid(at(xi, 1) + at(hi, 1));
          double g = std::tanh(at(xi, 2) + at(hi, 2)), o = sigmoid(at(xi, 3) + at(hi, 3));
          c[j] = f * c[j] + i * g;
          next[j] = o * std::tanh(c[j]);
          break;
        }
        case Cell::gru: {
          double r = sigmoid(at(xi, 0) + at(hi, 0)), z = sigmoid(at(xi, 1) + at(hi, 1));
          double n = std::tanh(at(xi, 2) + r * at(hi, 2));
          next[j] = (1 - z) * n + z * h[j];
          break;
        }
      }
    }
    h = next;
    for (int64_t j = 0; j < hidden; ++j) out[t * hidden + j] = h[j];
  }
  return out;
}

TEST(Recurrent, EveryCellMatchesTorchsEquationsInBothDirections) {
  const int64_t batch = 3, steps = 5, features = 4, hidden = 3;
  for (auto [cell, gates] : {std::pair{Cell::rnn_tanh, 1}, {Cell::rnn_relu, 1}, {Cell::lstm, 4}, {Cell::gru, 3}})
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(fmt::format("cell {} reverse {}", static_cast<int>(cell), reverse));
      const int64_t g = gates * hidden;
      Matrix x = random_values(batch * steps * features, 1), w_ih = random_values(g * features, 2),
             w_hh = random_values(g * hidden, 3), b_ih = random_values(g, 4), b_hh = random_values(g, 5);
      auto on_cpu = [](const Matrix& m, Shape shape) { return Var(Tensor::from_vector(m, shape, cpu())); };
      Var y = fn::recurrent_layer(on_cpu(x, {batch, steps, features}),
                                  {on_cpu(w_ih, {g, features}), on_cpu(w_hh, {g, hidden}), on_cpu(b_ih, {g}),
                                   on_cpu(b_hh, {g})},
                                  cell, reverse);
      ASSERT_EQ(y.value().shape(), (Shape{batch, steps, hidden}));
      auto got = y.value().to_doubles();
      for (int64_t n = 0; n < batch; ++n) {
        Matrix sample(x.begin() + n * steps * features, x.begin() + (n + 1) * steps * features);
        Matrix want = reference(cell, sample, steps, features, hidden, w_ih, w_hh, b_ih, b_hh, reverse);
        for (int64_t i = 0; i < steps * hidden; ++i) EXPECT_NEAR(got[n * steps * hidden + i], want[i], 1e-12);
      }
    }
}

// An embedding's output projected through its table (V rows instead of N*T): the same outputs and the
// same gradients for the table, every weight and bias, with and without a padding row (which gets no
// gradient through the table but still counts in the weight's and biases').
TEST(Recurrent, AnEmbeddingProjectedThroughItsTableGivesTheSameOutputsAndGradients) {
  const int64_t batch = 4, steps = 6, vocabulary = 5, width = 3, hidden = 2;
  std::vector<int64_t> ids(batch * steps);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 7 % vocabulary);
  const Tensor tokens = Tensor::from_vector(ids, {batch, steps}, cpu());
  for (auto [cell, gates] : {std::pair{Cell::rnn_tanh, 1}, {Cell::lstm, 4}, {Cell::gru, 3}})
    for (int64_t padding : {-1, 2}) {
      SCOPED_TRACE(fmt::format("cell {} padding {}", static_cast<int>(cell), padding));
      const int64_t g = gates * hidden;
      auto leaf = [](size_t count, uint64_t seed, Shape shape) {
        return Var(Tensor::from_vector(random_values(count, seed), shape, cpu()), true);
      };
      const Tensor weights = Tensor::from_vector(random_values(batch * steps * hidden, 9), {batch, steps, hidden}, cpu());
      std::vector<std::vector<double>> results[2];  // per path: the output, then each leaf's gradient
      for (bool through_table : {false, true}) {
        Var table = leaf(vocabulary * width, 1, {vocabulary, width});
        fn::RecurrentWeights w{leaf(g * width, 2, {g, width}), leaf(g * hidden, 3, {g, hidden}), leaf(g, 4, {g}),
                               leaf(g, 5, {g})};
        const fn::EmbeddedTokens embedded{tokens, table, padding};
        Var y = fn::recurrent_layer(fn::embedding(tokens, table, padding), w, cell, false, nullptr,
                                    through_table ? &embedded : nullptr);
        kestrel::backward(fn::sum(fn::mul(y, Var(weights))));
        auto& result = results[through_table];
        result.push_back(y.value().to_doubles());
        for (const Var& v : {table, w.weight_ih, w.weight_hh, w.bias_ih, w.bias_hh})
          result.push_back(v.grad().to_doubles());
      }
      for (size_t k = 0; k < results[0].size(); ++k) {
        ASSERT_EQ(results[0][k].size(), results[1][k].size());
        for (size_t i = 0; i < results[0][k].size(); ++i) EXPECT_NEAR(results[1][k][i], results[0][k][i], 1e-12) << k;
      }
      if (padding >= 0)
        for (int64_t d = 0; d < width; ++d) EXPECT_EQ(results[1][1][size_t(padding * width + d)], 0.0);
    }
}

// Two stacked bidirectional LSTM layers: torch's names and shapes, and an output of both directions.
TEST(Recurrent, AStackedBidirectionalLstmHasTorchsParameters) {
  kestrel::ModelSpec spec = kestrel::ModelSpec::parse(R"({"input": {"shape": [6], "dtype": "i64"}, "layers": [
      {"type": "embedding", "num_embeddings": 20, "embedding_dim": 5},
      {"name": "lstm", "type": "lstm", "hidden_size": 4, "num_layers": 2, "bidirectional": true, "dropout": 0.5},
      {"type": "last_step"}, {"type": "linear", "out_features": 3}]})", "inline");
  kestrel::Model model(spec, cpu(), 3);
  std::vector<std::string> names;
  for (const auto& p : model.parameters())
    if (p.name.rfind("lstm.", 0) == 0) names.push_back(p.name + kestrel::shape_str(p.var.value().shape()));
  const std::vector<std::string> want = {
      "lstm.weight_ih_l0(16, 5)", "lstm.weight_hh_l0(16, 4)", "lstm.bias_ih_l0(16,)", "lstm.bias_hh_l0(16,)",
      "lstm.weight_ih_l0_reverse(16, 5)", "lstm.weight_hh_l0_reverse(16, 4)", "lstm.bias_ih_l0_reverse(16,)",
      "lstm.bias_hh_l0_reverse(16,)", "lstm.weight_ih_l1(16, 8)", "lstm.weight_hh_l1(16, 4)", "lstm.bias_ih_l1(16,)",
      "lstm.bias_hh_l1(16,)", "lstm.weight_ih_l1_reverse(16, 8)", "lstm.weight_hh_l1_reverse(16, 4)",
      "lstm.bias_ih_l1_reverse(16,)", "lstm.bias_hh_l1_reverse(16,)"};
  EXPECT_EQ(names, want);
  for (const auto& p : model.parameters())  // torch: uniform in +-1/sqrt(hidden_size)
    if (p.name.rfind("lstm.", 0) == 0)
      for (double v : p.var.value().to_doubles()) ASSERT_LE(std::abs(v), 0.5) << p.name;
  uint64_t rng_offset = 0;
  Tensor tokens = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6}, cpu());
  Var training = model.forward(tokens, true, 0, rng_offset);
  EXPECT_EQ(training.value().shape(), (Shape{2, 3}));
  EXPECT_GT(rng_offset, 0u) << "dropout between the layers drew its mask";
  rng_offset = 0;
  model.forward(tokens, false, 0, rng_offset);
  EXPECT_EQ(rng_offset, 0u) << "no dropout in evaluation";
}

// Every device's recurrent layers as it runs them (one whole-layer op where the device has one, ABI 1.15:
// cuDNN's RNN API on CUDA; else its fused cells) against the same layers composed from primitives on the
// same device, in f32 from a carried non-zero state: outputs, the last state, and every gradient, after two
// backward passes, so the second adds into gradients already there.
TEST(Recurrent, EachDevicesLayersMatchItsComposedSteps) {
  const int64_t batch = 3, steps = 6, features = 5, hidden = 7;
  kestrel::Engine& engine = kestrel::Engine::global();
  for (const auto& plugin : engine.plugins())
    for (const auto& info : plugin.loaded ? plugin.devices : decltype(plugin.devices){}) {
      const kestrel::Device device = engine.device(fmt::format("{}:{}", plugin.name, info.index));
      for (auto [cell, gates] : {std::pair{Cell::rnn_tanh, 1}, {Cell::lstm, 4}, {Cell::gru, 3}}) {
        SCOPED_TRACE(fmt::format("{} cell {}", device.str(), static_cast<int>(cell)));
        const int64_t g = gates * hidden;
        auto values = [&](Shape shape, uint64_t seed) {
          std::vector<float> v;
          for (double d : random_values(size_t(kestrel::shape_numel(shape)), seed)) v.push_back(float(d * 0.5));
          return Tensor::from_vector(v, shape, device);
        };
        const Tensor x = values({batch, steps, features}, 11), w_ih = values({g, features}, 12),
                     w_hh = values({g, hidden}, 13), b_ih = values({g}, 14), b_hh = values({g}, 15),
                     h0 = values({batch, hidden}, 16), c0 = values({batch, hidden}, 17);
        // y, the last h and c, then the gradients of x, w_ih, w_hh, b_ih and b_hh.
        auto run = [&](bool fused) {
          const kestrel::ops::FusedOpsScope fused_ops(fused);
          std::vector<Var> leaves{Var(x, true), Var(w_ih, true), Var(w_hh, true), Var(b_ih, true), Var(b_hh, true)};
          std::vector<std::vector<double>> got;
          for (int pass = 0; pass < 2; ++pass) {
            fn::RecurrentState state{h0, cell == Cell::lstm ? c0 : Tensor()};
            Var y = fn::recurrent_layer(leaves[0], {leaves[1], leaves[2], leaves[3], leaves[4]}, cell, false, &state);
            kestrel::backward(fn::mean(fn::mul(y, y)));
            if (pass == 1) {
              got.push_back(y.value().to_doubles());
              got.push_back(state.h.to_doubles());
              got.push_back(state.c.defined() ? state.c.to_doubles() : std::vector<double>{});
            }
          }
          for (const Var& leaf : leaves) got.push_back(leaf.grad().to_doubles());
          return got;
        };
        const auto composed = run(false), fused = run(true);
        const char* what[] = {"y", "last h", "last c", "dx", "dweight_ih", "dweight_hh", "dbias_ih", "dbias_hh"};
        for (size_t k = 0; k < composed.size(); ++k) {
          ASSERT_EQ(fused[k].size(), composed[k].size()) << what[k];
          for (size_t i = 0; i < composed[k].size(); ++i)
            ASSERT_NEAR(fused[k][i], composed[k][i], 1e-5 + 1e-4 * std::abs(composed[k][i])) << what[k] << " " << i;
        }
      }
    }
}

void expect_model_error(const std::string& layer, const std::string& fragment) {
  try {
    kestrel::ModelSpec::parse(R"({"input": {"shape": [5, 3]}, "layers": [)" + layer + "]}", "rnn.json");
    FAIL() << "accepted: " << layer;
  } catch (const kestrel::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Recurrent, AModelFileGetsClearErrors) {
  expect_model_error(R"({"type": "rnn", "hidden_size": 4, "nonlinearity": "sigmoid"})",
                     "rnn.json: /layers/0/nonlinearity: rnn expects one of tanh, relu");
  expect_model_error(R"({"type": "lstm", "hidden_size": 4, "batch_first": false})", "batch_first must be true");
  expect_model_error(R"({"type": "gru"})", "hidden_size");
  expect_model_error(R"({"type": "gru", "hidden_size": 4, "dropout": 1})", "/layers/0/dropout");
  expect_model_error(R"({"type": "flatten"}, {"type": "lstm", "hidden_size": 4})", "lstm expects a batch-first sequence");
  expect_model_error(R"({"type": "flatten"}, {"type": "last_step"})", "last_step expects a batch-first sequence");
}

}  // namespace
