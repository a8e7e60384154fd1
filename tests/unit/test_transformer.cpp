// Attention and Transformer layers: attention against a plain double-precision reference of its
// definition, torch's parameter names, causal masking (no position sees a later one), and step-by-step
// decoding with cached keys and values equal to the whole sequence in one pass.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/generate.h"
#include "kestrel/model.h"
#include "kestrel/ops.h"

namespace {

using kestrel::Shape;
using kestrel::Tensor;
using kestrel::Var;
namespace fn = kestrel::fn;

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

std::vector<double> random_values(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> values(count);
  for (double& v : values) v = dist(rng);
  return values;
}

// Attention's definition in double precision on q (B, Tq, D), k and v (B, Tk, D), each query i of entry b
// weighing only the keys j with seen(b, i, j): softmax(q k^T / sqrt(D)) v over those keys -> (B, Tq, D).
template <class Seen>
std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, int64_t batch, int64_t queries, int64_t keys,
                                        int64_t depth, Seen seen) {
  std::vector<double> out(static_cast<size_t>(batch * queries * depth), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < queries; ++i) {
      std::vector<double> weights(keys, 0.0);
      double total = 0;
      for (int64_t j = 0; j < keys; ++j) {
        if (!seen(b, i, j)) continue;
        double dot = 0;
        for (int64_t d = 0; d < depth; ++d) dot += q[(b * queries + i) * depth + d] * k[(b * keys + j) * depth + d];
        weights[j] = std::exp(dot / std::sqrt(double(depth)));
        total += weights[j];
      }
      for (int64_t j = 0; j < keys; ++j)
        for (int64_t d = 0; d < depth; ++d)
          out[(b * queries + i) * depth + d] += weights[j] / total * v[(b * keys + j) * depth + d];
    }
  return out;
}

std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                           int64_t batch, int64_t queries, int64_t keys, int64_t depth, const fn::AttentionOptions& o) {
  return fn::scaled_dot_product_attention(Var(Tensor::from_vector(q, {batch, queries, depth}, cpu())),
                                          Var(Tensor::from_vector(k, {batch, keys, depth}, cpu())),
                                          Var(Tensor::from_vector(v, {batch, keys, depth}, cpu())), o)
      .value()
      .to_doubles();
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], want[e], tolerance) << "element " << e;
}

TEST(Attention, MatchesItsDefinitionWithAndWithoutTheCausalMask) {
  const int64_t batch = 2, queries = 3, keys = 5, depth = 4;
  auto q = random_values(batch * queries * depth, 1), k = random_values(batch * keys * depth, 2),
       v = random_values(batch * keys * depth, 3);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    fn::AttentionOptions o;
    o.causal = causal;
    // Query i continues 2 earlier positions: causally it sees keys 0 .. 2 + i.
    expect_near(attend(q, k, v, batch, queries, keys, depth, o),
                attention_reference(q, k, v, batch, queries, keys, depth,
                                    [&](int64_t, int64_t i, int64_t j) { return !causal || j <= keys - queries + i; }),
                1e-12);
  }
}

// Dropout on the attention weights (plugin ABI 1.8): the CPU's fused op draws the composed path's mask
// (RANDOM's Bernoulli over the (B, Tq, Tk) weights at the same seed and offset), so both give the same
// output and gradients, and a captured step's counter base (CounterBaseScope) draws the same bits too;
// likewise with a key-padding mask (1.9) over 2 samples of 2 heads whose first two keys leave the first
// two causal queries of sample 0 only padding (which they weigh evenly).
TEST(Attention, DropoutDropsTheSameWeightsFusedAndComposed) {
  const int64_t batch = 4, queries = 6, keys = 6, depth = 8;
  const auto q = random_values(batch * queries * depth, 4), k = random_values(batch * keys * depth, 5),
             v = random_values(batch * keys * depth, 6), w = random_values(batch * queries * depth, 7);
  struct Result {
    std::vector<double> out, dq, dk, dv;
  };
  const std::vector<double> padding{1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0};  // (2 samples, 6 keys)
  auto run = [&](bool fused, bool causal, double dropout, bool scoped, bool padded) {
    const kestrel::ops::FusedOpsScope fused_ops(fused);
    Var tq(Tensor::from_vector(q, {batch, queries, depth}, cpu()).to(kestrel::DType::f32), true),
        tk(Tensor::from_vector(k, {batch, keys, depth}, cpu()).to(kestrel::DType::f32), true),
        tv(Tensor::from_vector(v, {batch, keys, depth}, cpu()).to(kestrel::DType::f32), true);
    fn::AttentionOptions o;
    o.causal = causal;
    o.dropout = dropout;
    o.training = true;
    o.seed = 11;
    o.offset = 40;
    if (padded) o.key_padding = Tensor::from_vector(padding, {batch / 2, keys}, cpu()).to(kestrel::DType::f32);
    Tensor base = Tensor::full({}, 25.0, kestrel::DType::i64, cpu());
    std::optional<kestrel::ops::CounterBaseScope> scope;
    if (scoped) scope.emplace(base, 25);
    Var out = fn::scaled_dot_product_attention(tq, tk, tv, o);
    kestrel::backward(fn::sum(fn::mul(out, Var(Tensor::from_vector(w, {batch, queries, depth}, cpu())
                                                     .to(kestrel::DType::f32)))));
    return Result{out.value().to_doubles(), tq.grad().to_doubles(), tk.grad().to_doubles(), tv.grad().to_doubles()};
  };
  auto expect_near = [](const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5) << what << " " << i;
  };
  {  // the CPU plugin takes the fused op with dropout, so the comparison below is of two paths
    Tensor t = Tensor::zeros({batch, queries, depth}, kestrel::DType::f32, cpu());
    Tensor lse = Tensor::zeros({batch, queries}, kestrel::DType::f32, cpu());
    auto p = kestrel::abi_init<kestrel_attention_params>();
    p.scale = 1.0, p.dropout = 0.3;
    EXPECT_TRUE(kestrel::ops::supports(
        cpu(), kestrel::ops::make_op(KESTREL_OP_ATTENTION, &p, {t, t, t, Tensor::zeros({}, kestrel::DType::i64, cpu())},
                                     {t, lse})));
  }
  for (bool padded : {false, true})
  for (bool causal : {false, true}) {
    SCOPED_TRACE(fmt::format("causal {}, padded {}", causal, padded));
    const Result composed = run(false, causal, 0.3, false, padded), fused = run(true, causal, 0.3, false, padded);
    expect_near(fused.out, composed.out, "output");
    expect_near(fused.dq, composed.dq, "dq");
    expect_near(fused.dk, composed.dk, "dk");
    expect_near(fused.dv, composed.dv, "dv");
    expect_near(run(true, causal, 0.3, true, padded).out, fused.out, "output with the counter base");
    // The mask matters: without dropout the output is another.
    const Result all = run(true, causal, 0.0, false, padded);
    double moved = 0;
    for (size_t i = 0; i < all.out.size(); ++i) moved = std::max(moved, std::abs(all.out[i] - fused.out[i]));
    EXPECT_GT(moved, 1e-2);
  }
}

kestrel::ModelSpec gpt(const std::string& extra = "") {
  return kestrel::ModelSpec::parse(R"({"name": "tiny_gpt", "input": {"shape": [8], "dtype": "i64"}, "layers": [
      {"type": "embedding", "num_embeddings": 20, "embedding_dim": 8},
      {"type": "positional_embedding", "max_len": 8, "embedding_dim": 8},
      {"name": "block", "type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16,
       "dropout": 0.1, "activation": "gelu", "norm_first": true, "causal": true)" + extra + R"(},
      {"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16, "causal": true},
      {"type": "layernorm", "normalized_shape": 8}, {"type": "linear", "out_features": 20}]})",
                                   "gpt.json");
}

// With `padded`, token 0 is padding in the source and the target (key-padding masks as the transformer's
// third and fourth inputs).
kestrel::ModelSpec encoder_decoder(bool padded = false) {
  return kestrel::ModelSpec::parse(R"({"name": "tiny_transformer", "input": {"shape": [6], "dtype": "i64"}, "nodes": [
      {"name": "embed", "type": "embedding", "num_embeddings": 20, "embedding_dim": 8, "inputs": ["input"]},
      {"name": "padding", "type": "key_padding_mask", "inputs": ["input"]},
      {"name": "positions", "type": "positional_encoding", "max_len": 64, "inputs": ["embed"]},
      {"name": "transformer", "type": "transformer", "d_model": 8, "nhead": 2, "num_encoder_layers": 1,
       "num_decoder_layers": 2, "dim_feedforward": 16, "causal": true, "inputs": ["positions", "positions")" +
                                       std::string(padded ? R"(, "padding", "padding")" : "") + R"(]},
      {"name": "head", "type": "linear", "out_features": 20, "inputs": ["transformer"]}]})",
                                   padded ? "padded_transformer.json" : "transformer.json");
}

// Causal attention layers of every kind whose keys skip token 0 (padding): an encoder layer, a stand-alone
// attention and a decoder layer's attention over its memory and its own.
kestrel::ModelSpec padded_gpt() {
  return kestrel::ModelSpec::parse(R"({"name": "padded_gpt", "input": {"shape": [8], "dtype": "i64"}, "nodes": [
      {"name": "embed", "type": "embedding", "num_embeddings": 20, "embedding_dim": 8, "inputs": ["input"]},
      {"name": "padding", "type": "key_padding_mask", "padding_idx": 0, "inputs": ["input"]},
      {"name": "positions", "type": "positional_embedding", "max_len": 8, "embedding_dim": 8, "inputs": ["embed"]},
      {"name": "block", "type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16,
       "causal": true, "inputs": ["positions", "padding"]},
      {"name": "attend", "type": "multihead_attention", "embed_dim": 8, "num_heads": 2, "causal": true,
       "inputs": ["block", "padding"]},
      {"name": "decode", "type": "transformer_decoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16,
       "memory_causal": true, "inputs": ["attend", "positions", "padding", "padding"]},
      {"name": "head", "type": "linear", "out_features": 20, "inputs": ["decode"]}]})",
                                   "padded_gpt.json");
}

// A pre-norm block's residual stream x feeds the norm and the skip connection. The skip's gradient is
// there when the norm's backward runs, which adds its dx to it in the same pass where the device takes
// that (ABI 1.16). The gradient must be the bits of the norm's dx and a separate addition: the same as
// when the skip's gradient arrives after the norm's backward (through x * 1, which the backward reaches
// later), in f32 and in bf16, on every device.
TEST(Transformer, TheNormAddsItsGradientToTheResidualStreamsWithTheSameBits) {
  kestrel::Engine& engine = kestrel::Engine::global();
  for (const auto& plugin : engine.plugins())
    for (const auto& info : plugin.loaded ? plugin.devices : decltype(plugin.devices){})
      for (kestrel::DType dtype : {kestrel::DType::f32, kestrel::DType::bf16}) {
        const kestrel::Device device = engine.device(plugin.name + ":" + std::to_string(info.index));
        SCOPED_TRACE(device.str() + " " + std::string(kestrel::dtype_name(dtype)));
        auto tensor = [&](Shape shape, uint64_t seed) {
          const size_t count = size_t(shape[0] * shape[1]);
          return Tensor::from_vector(random_values(count, seed), shape, cpu()).to(dtype).to(device);
        };
        const Tensor x = tensor({10, 48}, 31), w = tensor({48, 1}, 32), b = tensor({48, 1}, 33),
                     mix = tensor({48, 48}, 34);
        auto gradient_of_x = [&](bool skip_after_norm) {
          Var input(x, true), weight(w.view({48}), true), bias(b.view({48}), true), product(mix, true);
          const Var skip = skip_after_norm ? fn::mul(input, Var(Tensor::full({}, 1.0, dtype, device))) : input;
          const Var block = fn::linear(fn::layer_norm(input, weight, bias, 1, 1e-5), product, Var());  // (10, 48)
          kestrel::backward(fn::mean(fn::tanh(fn::add(skip, block))));
          return input.grad().to_doubles();
        };
        const std::vector<double> added = gradient_of_x(false), after = gradient_of_x(true);
        // The CPU offers the adding backward, so there the first run added in the norm and the second did not.
        if (device.str() == "cpu:0" && dtype == kestrel::DType::f32) {
          const kestrel_layer_norm_params params{kestrel::abi_size<kestrel_layer_norm_params>, 1e-5};
          auto zeros = [&](Shape shape) { return Tensor::zeros(shape, dtype, device); };
          const Tensor statistics = zeros({10});
          EXPECT_TRUE(kestrel::ops::supports(
              device, kestrel::ops::make_op(KESTREL_OP_LAYER_NORM_BACKWARD, &params,
                                            {zeros({10, 48}), x, statistics, statistics, zeros({48}), zeros({10, 48})},
                                            {zeros({10, 48}), zeros({48}), zeros({48})})));
        }
        ASSERT_EQ(added.size(), after.size());
        for (size_t i = 0; i < added.size(); ++i) ASSERT_EQ(added[i], after[i]) << "element " << i;
      }
}

TEST(Transformer, ParametersHaveTorchsNames) {
  kestrel::Model model(gpt(), cpu(), 1);
  std::vector<std::string> names;
  for (const auto& p : model.parameters())
    if (p.name.rfind("block.", 0) == 0) names.push_back(p.name + kestrel::shape_str(p.var.value().shape()));
  EXPECT_EQ(names, (std::vector<std::string>{
                       "block.self_attn.in_proj_weight(24, 8)", "block.self_attn.in_proj_bias(24,)",
                       "block.self_attn.out_proj.weight(8, 8)", "block.self_attn.out_proj.bias(8,)",
                       "block.linear1.weight(16, 8)", "block.linear1.bias(16,)", "block.linear2.weight(8, 16)",
                       "block.linear2.bias(8,)", "block.norm1.weight(8,)", "block.norm1.bias(8,)",
                       "block.norm2.weight(8,)", "block.norm2.bias(8,)"}));
  kestrel::Model seq2seq(encoder_decoder(), cpu(), 1);
  size_t decoder_norm3 = 0;
  for (const auto& p : seq2seq.parameters())
    decoder_norm3 += p.name == "transformer.decoder.layers.1.norm3.weight" || p.name == "transformer.encoder.norm.bias" ||
                     p.name == "transformer.decoder.layers.0.multihead_attn.in_proj_weight";
  EXPECT_EQ(decoder_norm3, 3u);
}

// Changing a later token changes nothing at earlier positions: no position sees the future, not even a
// padded one, whose only visible keys are padding (the first two tokens, 0, pad the key-padding models).
TEST(Transformer, CausalLayersNeverSeeLaterPositions) {
  for (const kestrel::ModelSpec& spec : {gpt(), encoder_decoder(), padded_gpt(), encoder_decoder(true)}) {
    SCOPED_TRACE(spec.source());
    kestrel::Model model(spec, cpu(), 2);
    const int64_t length = spec.input_shape()[0];
    std::vector<int64_t> ids(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) ids[i] = i < 2 ? 0 : (3 * i + 1) % 20;
    uint64_t unused = 0;
    auto a = model.forward(Tensor::from_vector(ids, {1, length}, cpu()), false, 0, unused).value().to_vector<float>();
    ids[4] = 19;
    auto b = model.forward(Tensor::from_vector(ids, {1, length}, cpu()), false, 0, unused).value().to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) {
      if (static_cast<int64_t>(i) / 20 < 4) {
        EXPECT_EQ(a[i], b[i]) << "position " << i / 20 << " saw position 4";
      }
    }
    EXPECT_NE(a[4 * 20], b[4 * 20]);
  }
}

// Decoding three positions, then one at a time with cached keys and values, gives the outputs of the
// whole sequence in one pass.
TEST(Transformer, DecodingWithTheCacheEqualsTheWholeSequence) {
  for (const kestrel::ModelSpec& spec : {gpt(), encoder_decoder(), padded_gpt(), encoder_decoder(true)}) {
    SCOPED_TRACE(spec.source());
    kestrel::Model model(spec, cpu(), 3);
    const int64_t length = spec.input_shape()[0];
    std::vector<int64_t> ids(static_cast<size_t>(2 * length));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 7 + 2) % 20;
    ids[0] = ids[1] = 0;  // the first sequence starts with two padded positions (token 0, padding where masked)
    Tensor tokens = Tensor::from_vector(ids, {2, length}, cpu());
    uint64_t unused = 0;
    auto whole = model.forward(tokens, false, 0, unused).value().to_vector<float>();  // (2, T, 20)
    kestrel::Model::DecodeState state;
    std::vector<Tensor> parts{model.decode(tokens.slice(1, 0, 3), state)};
    for (int64_t t = 3; t < length; ++t) parts.push_back(model.decode(tokens.slice(1, t, t + 1), state));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t t = 0; t < length; ++t) {
        const Tensor& part = parts[t < 3 ? 0 : size_t(t - 2)];
        auto row = part.select(0, n).select(0, t < 3 ? t : 0).to_vector<float>();
        for (int64_t c = 0; c < 20; ++c) ASSERT_NEAR(row[c], whole[(n * length + t) * 20 + c], 1e-5) << n << " " << t;
      }
  }
}

// Key padding (N = 2 samples of 2 heads): each query weighs only its sample's real keys, as the
// definition computed in double precision over those keys alone, with and without the causal mask,
// fused and composed.
TEST(Attention, PaddedKeysGetNoWeight) {
  const int64_t samples = 2, heads = 2, batch = samples * heads, queries = 3, keys = 5, depth = 4;
  const std::vector<double> padding{0, 0, 0, 0, 1, 0, 1, 0, 0, 0};  // sample 0's last key, sample 1's second
  auto q = random_values(batch * queries * depth, 11), k = random_values(batch * keys * depth, 12),
       v = random_values(batch * keys * depth, 13);
  for (bool fused : {true, false})  // the CPU plugin's fused op takes the mask (plugin ABI 1.9)
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("{}, {}", fused ? "fused" : "composed", causal ? "causal" : "not causal"));
      const kestrel::ops::FusedOpsScope fused_ops(fused);
      fn::AttentionOptions o;
      o.causal = causal;
      o.key_padding = Tensor::from_vector(padding, {samples, keys}, cpu());
      expect_near(attend(q, k, v, batch, queries, keys, depth, o),
                  attention_reference(q, k, v, batch, queries, keys, depth,
                                      [&](int64_t b, int64_t i, int64_t j) {
                                        return (!causal || j <= keys - queries + i) &&
                                               padding[(b / heads) * keys + j] == 0;
                                      }),
                  1e-12);
    }
  {  // which the CPU plugin offers, so the loop above compared two paths
    Tensor t = Tensor::zeros({batch, queries, depth}, kestrel::DType::f64, cpu());
    Tensor lse = Tensor::zeros({batch, queries}, kestrel::DType::f64, cpu());
    auto p = kestrel::abi_init<kestrel_attention_params>();
    p.scale = 1.0, p.key_padding = 1;
    EXPECT_TRUE(kestrel::ops::supports(
        cpu(), kestrel::ops::make_op(KESTREL_OP_ATTENTION, &p,
                                     {t, t, t, Tensor::zeros({samples, queries}, kestrel::DType::f64, cpu())}, {t, lse})));
  }
  fn::AttentionOptions wrong;
  wrong.key_padding = Tensor::zeros({samples, keys + 1}, kestrel::DType::f64, cpu());
  Var x(Tensor::from_vector(q, {batch, queries, depth}, cpu()));
  EXPECT_THROW(fn::scaled_dot_product_attention(x, x, x, wrong), kestrel::InvalidArgument);
}

// What sits at padded positions reaches no real position through a key-padding mask: changing the
// padding token's embedding changes only the padded positions' outputs (and, without the mask, the others').
// With `decoder`, the second block is a decoder layer over the first's output whose memory and own keys
// both skip the padding (its causal self-attention then sees padding only where a padded position
// precedes a real one, which the tokens below have in both samples).
TEST(Transformer, KeyPaddingMaskHidesThePadding) {
  auto spec = [](bool masked, bool decoder) {
    const std::string mask = masked ? R"(, "padding")" : "";
    const std::string second =
        decoder ? R"("type": "transformer_decoder_layer", "inputs": ["block1", "block1")" + mask + mask
                : R"("type": "transformer_encoder_layer", "inputs": ["block1")" + mask;
    return kestrel::ModelSpec::parse(R"({"input": {"shape": [6], "dtype": "i64"}, "nodes": [
        {"name": "embed", "type": "embedding", "num_embeddings": 20, "embedding_dim": 8, "inputs": ["input"]},
        {"name": "padding", "type": "key_padding_mask", "inputs": ["input"]},
        {"name": "positions", "type": "positional_encoding", "max_len": 6, "inputs": ["embed"]},
        {"name": "block1", "type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16,
         "inputs": ["positions")" + mask + R"(]},
        {"name": "block2", "d_model": 8, "nhead": 2, "dim_feedforward": 16, )" + second + R"(]},
        {"name": "head", "type": "linear", "out_features": 3, "inputs": ["block2"]}]})",
                                     "padded.json");
  };
  const Tensor tokens = Tensor::from_vector<int64_t>({0, 0, 0, 5, 6, 7, 0, 9, 3, 4, 1, 2}, {2, 6}, cpu());
  for (auto [masked, decoder] : {std::pair{true, false}, {false, false}, {true, true}, {false, true}}) {
    SCOPED_TRACE(fmt::format("{} {}", masked ? "masked" : "unmasked", decoder ? "decoder" : "encoder"));
    kestrel::Model model(spec(masked, decoder), cpu(), 8);
    uint64_t unused = 0;
    const auto before = model.forward(tokens, false, 0, unused).value().to_vector<float>();  // (2, 6, 3)
    Tensor padding_row = model.parameters()[0].var.value().select(0, 0);
    padding_row.copy_from(Tensor::from_vector(random_values(8, 14), {8}, cpu()));
    const auto after = model.forward(tokens, false, 0, unused).value().to_vector<float>();
    double real = 0, padded = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      const bool is_padding = tokens.to_vector<int64_t>()[i / 3] == 0;
      (is_padding ? padded : real) = std::max(is_padding ? padded : real, double(std::abs(after[i] - before[i])));
    }
    EXPECT_GT(padded, 1e-3);
    if (masked)
      EXPECT_EQ(real, 0.0);
    else
      EXPECT_GT(real, 1e-3);
  }
}

// Past max_len generation slides its window instead of stopping; a prompt longer than it keeps its end.
TEST(Transformer, GenerationSlidesPastMaxLen) {
  kestrel::Model model(gpt(), cpu(), 5);
  std::vector<char32_t> letters;
  for (char c = 'a'; c < 'a' + 20; ++c) letters.push_back(static_cast<char32_t>(c));
  const auto vocabulary = kestrel::data::Vocabulary::characters({letters});
  kestrel::GenerateOptions options;
  options.prompt = "abcdefghijklm";  // 13 characters for a window of 8
  options.tokens = 30;
  options.seed = 3;
  const kestrel::GenerateResult first = kestrel::generate(model, vocabulary, options);
  EXPECT_EQ(first.tokens, 30);
  // Within the window the cached keys and values give what running everything again gives.
  options.prompt = "abc";
  options.tokens = 5;
  const std::string cached = kestrel::generate(model, vocabulary, options).text;
  options.cache = false;
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, cached);
  options.cache = true;
  options.prompt = "abcdefghijklm";
  options.tokens = 30;
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, first.text);
  // Past the window too: without the cache the context slides where the cache's does (found by review:
  // it kept the last 8 positions instead, and the texts parted there).
  options.cache = false;
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, first.text);
  options.cache = true;
  options.temperature = 0;
  options.tokens = 1;
  options.prompt = "fghijklm";  // what the window keeps of the long prompt: the same greedy continuation
  const std::string kept = kestrel::generate(model, vocabulary, options).text;
  options.prompt = "abcdefghijklm";
  EXPECT_EQ(kestrel::generate(model, vocabulary, options).text, kept);
}

TEST(Transformer, PositionsPastMaxLenAndBadShapesAreRefused) {
  kestrel::Model model(gpt(), cpu(), 4);
  kestrel::Model::DecodeState state;
  model.decode(Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8}, cpu()), state);
  try {
    model.decode(Tensor::from_vector<int64_t>({1}, {1, 1}, cpu()), state);
    FAIL() << "position 8 of a max_len 8 model was decoded";
  } catch (const kestrel::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("past the model's max_len 8"), std::string::npos) << e.what();
  }
  auto error_of = [](const std::string& layers) {
    try {
      kestrel::ModelSpec::parse(R"({"input": {"shape": [8, 6]}, "layers": [)" + layers + "]}", "t.json");
    } catch (const kestrel::ModelError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error_of(R"({"type": "multihead_attention", "embed_dim": 6, "num_heads": 4})").find("not a multiple of num_heads"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2})").find("(N, T, 8)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "positional_encoding", "max_len": 4})").find("raise max_len"), std::string::npos);
  auto graph_error_of = [](const std::string& nodes) {
    try {
      kestrel::ModelSpec::parse(R"({"input": {"shape": [8], "dtype": "i64"}, "nodes": [
          {"name": "embed", "type": "embedding", "num_embeddings": 20, "embedding_dim": 8, "inputs": ["input"]},
          {"name": "padding", "type": "key_padding_mask", "inputs": ["input"]}, )" + nodes + "]}",
                                "t.json");
    } catch (const kestrel::ModelError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(graph_error_of(R"({"name": "a", "type": "multihead_attention", "embed_dim": 8, "num_heads": 2,
                               "inputs": ["embed", "embed"]})")
                .find("input 1 is a key-padding mask: name a key_padding_mask layer of the tokens, not 'embed'"),
            std::string::npos);
  EXPECT_NE(graph_error_of(R"({"name": "a", "type": "multihead_attention", "embed_dim": 8, "num_heads": 2,
                               "inputs": ["embed", "padding", "padding"]})")
                .find("takes 1 to 2 input(s), got 3"),
            std::string::npos);
  EXPECT_NE(graph_error_of(R"({"name": "a", "type": "key_padding_mask", "inputs": ["embed"]})").find("reads"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "transformer_encoder_layer", "d_model": 6, "nhead": 2, "activation": "swish"})")
                .find("expects one of relu, gelu"),
            std::string::npos);
}

}  // namespace
