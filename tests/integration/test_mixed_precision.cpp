// Mixed precision (bf16 products, f32 everything else): what the scope rounds, where gradients go, and a
// trained model's accuracy against f32's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "kestrel/engine.h"
#include "kestrel/functional.h"
#include "kestrel/trainer.h"
#include "cli_run.h"

namespace {

using kestrel::DType;
using kestrel::Tensor;
using kestrel::Var;
namespace fn = kestrel::fn;
namespace fs = std::filesystem;

kestrel::Device cpu() { return kestrel::Engine::global().device("cpu"); }

Tensor random_f32(const kestrel::Shape& shape, uint64_t seed) {
  std::mt19937 rng{static_cast<uint32_t>(seed)};
  std::normal_distribution<float> normal;
  std::vector<float> values(kestrel::shape_numel(shape));
  for (float& v : values) v = normal(rng);
  return Tensor::from_vector(values, shape, cpu());
}

Tensor rounded(const Tensor& t, DType dtype) { return t.to(dtype).to(DType::f32); }

TEST(MixedPrecision, AProductRoundsItsOperandsAndItsResultOnly) {
  const Tensor x = random_f32({6, 20}, 1), w = random_f32({5, 20}, 2), b = random_f32({5}, 3);
  // The reference: f32 arithmetic on the operands rounded to bf16, the result rounded once.
  const Tensor want = rounded(fn::linear(Var(rounded(x, DType::bf16)), Var(rounded(w, DType::bf16)),
                                         Var(rounded(b, DType::bf16)), KESTREL_ACTIVATION_RELU)
                                  .value(),
                              DType::bf16);
  Tensor got;
  {
    fn::AutocastScope autocast(DType::bf16);
    EXPECT_EQ(fn::autocast_dtype(), DType::bf16);
    got = fn::linear(Var(x), Var(w), Var(b), KESTREL_ACTIVATION_RELU).value();
  }
  EXPECT_EQ(fn::autocast_dtype(), DType::f32) << "the scope ends with its block";
  EXPECT_EQ(got.dtype(), DType::bf16) << "the activations between products stay 16-bit";
  EXPECT_EQ(got.to(DType::f32).to_vector<float>(), want.to_vector<float>());
  // Without a scope nothing is rounded.
  const Tensor exact = fn::linear(Var(x), Var(w), Var(b)).value();
  EXPECT_NE(exact.to_vector<float>(), fn::linear(Var(rounded(x, DType::bf16)), Var(w), Var(b)).value().to_vector<float>());
}

// A 16-bit convolution on the CPU computes in f32 on its rounded operands and rounds each result once,
// through the fused ops' f32 kernels in chunks of images: 12 images of 256 x 256 into 32 channels make
// several chunks (ops_conv.cpp), whose weight gradients are added across chunks. Forward, input and
// weight gradients against the f32 ops on the same rounded values.
TEST(MixedPrecision, A16BitConvolutionOnTheCpuComputesInF32ChunkByChunk) {
  const Tensor x = rounded(random_f32({12, 1, 256, 256}, 4), DType::bf16);
  const Tensor w = rounded(random_f32({32, 1, 3, 3}, 5), DType::bf16), b = rounded(random_f32({32}, 6), DType::bf16);
  kestrel::ops::Window window;
  window.kernel_h = window.kernel_w = 3;
  window.pad_h = window.pad_w = 1;
  auto run = [&](DType dtype) {  // y, dx, dw, db of sum(conv(x) with ReLU), as f32
    Var xv(x.to(dtype), true), wv(w.to(dtype), true), bv(b.to(dtype), true);
    const Var y = fn::conv2d(xv, wv, bv, window, KESTREL_ACTIVATION_RELU);
    kestrel::backward(fn::sum(y));
    return std::vector<Tensor>{y.value().to(DType::f32), xv.grad().to(DType::f32), wv.grad().to(DType::f32),
                               bv.grad().to(DType::f32)};
  };
  const std::vector<Tensor> narrow = run(DType::bf16), wide = run(DType::f32);
  const char* names[] = {"y", "dx", "dw", "db"};
  for (size_t t = 0; t < narrow.size(); ++t) {
    const std::vector<float> got = narrow[t].to_vector<float>(), want = rounded(wide[t], DType::bf16).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-2 * std::max(1.0f, std::fabs(want[i]))) << names[t] << " element " << i;
  }
}

// torch.autocast's three kinds of op: products return the scope's dtype, activations keep what they get,
// and ops that need f32 (softmax, norms, losses, reductions, pooling) widen; two dtypes meet in the wider.
TEST(MixedPrecision, ProductsStay16BitAndTheF32OpsWiden) {
  const Tensor x = random_f32({4, 6}, 7), w = random_f32({5, 6}, 8), residual = random_f32({4, 5}, 9);
  fn::AutocastScope autocast(DType::f16);
  const Var product = fn::linear(Var(x), Var(w), Var());  // (4, 5)
  EXPECT_EQ(product.value().dtype(), DType::f16);
  EXPECT_EQ(fn::relu(product).value().dtype(), DType::f16);
  EXPECT_EQ(fn::linear(fn::relu(product), Var(random_f32({3, 5}, 10)), Var()).value().dtype(), DType::f16)
      << "a 16-bit input goes straight into the next product";
  const Var sum = fn::add(product, Var(residual));
  EXPECT_EQ(sum.value().dtype(), DType::f32) << "f16 + f32 promotes";
  EXPECT_EQ(sum.value().to_vector<float>(),
            fn::add(Var(product.value().to(DType::f32)), Var(residual)).value().to_vector<float>());
  EXPECT_EQ(fn::softmax(product).value().dtype(), DType::f32);
  EXPECT_EQ(fn::layer_norm(product, Var(), Var(), 1, 1e-5).value().dtype(), DType::f32);
  EXPECT_EQ(fn::mean(product).value().dtype(), DType::f32);
  EXPECT_EQ(fn::cross_entropy(product, Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4}, cpu())).value().dtype(),
            DType::f32);
  EXPECT_EQ(fn::concat({product, Var(residual)}, 0).value().dtype(), DType::f32);
}

TEST(MixedPrecision, GradientsReachTheF32WeightsThroughTheCasts) {
  const Tensor x = random_f32({8, 3, 10, 10}, 4), w = random_f32({4, 3, 3, 3}, 5), v = random_f32({7, 4}, 6);
  auto gradients = [&](DType precision) {
    Var input(x), weight(w, true), other(v, true);
    fn::AutocastScope autocast(precision);
    Var y = fn::conv2d(input, weight, Var(), kestrel::ops::Window{3, 3, 1, 1, 1, 1, 1, 1});  // (8, 4, 10, 10)
    Var pooled = fn::mean_over(fn::reshape(y, {8, 4, 100}), 2);                           // (8, 4)
    Var z = fn::matmul(fn::reshape(other, {1, 7, 4}), fn::reshape(fn::permute(pooled, {1, 0}), {1, 4, 8}));
    kestrel::backward(fn::mean(fn::tanh(z)));
    return std::pair{weight.grad(), other.grad()};
  };
  auto [weight32, other32] = gradients(DType::f32);
  auto [weight16, other16] = gradients(DType::bf16);
  ASSERT_EQ(weight16.dtype(), DType::f32);
  ASSERT_EQ(other16.dtype(), DType::f32);
  auto close = [](const Tensor& got, const Tensor& want) {
    auto g = got.to_vector<float>(), e = want.to_vector<float>();
    double error = 0, scale = 0;
    for (size_t i = 0; i < g.size(); ++i) error = std::max(error, double(std::abs(g[i] - e[i]))), scale = std::max(scale, double(std::abs(e[i])));
    return error / scale;
  };
  // bf16 keeps 8 bits of mantissa: relative rounding 2^-9 per operand.
  EXPECT_LT(close(weight16, weight32), 3e-2);
  EXPECT_LT(close(other16, other32), 3e-2);
  EXPECT_GT(close(weight16, weight32), 0) << "the products did run in bf16";
}

// A pre-norm block's norm feeds only products, so under autocast it comes out 16-bit (ABI 1.15's lowered
// rows where the device has them): the same bits as the f32 norm cast, and, given the same 16-bit gradient
// of y, the same gradients for x and the norm's weight and bias, on every device. (Behind a product that
// gradient is now its 16-bit input's, as under torch.autocast; before, the product handed the f32 y an
// unrounded f32 gradient.)
TEST(MixedPrecision, ANormThatFeedsProductsComesOut16BitWithTheCastsBits) {
  kestrel::Engine& engine = kestrel::Engine::global();
  for (const auto& plugin : engine.plugins())
    for (const auto& info : plugin.loaded ? plugin.devices : decltype(plugin.devices){}) {
      const kestrel::Device device = engine.device(plugin.name + ":" + std::to_string(info.index));
      for (DType precision : {DType::bf16, DType::f16}) {
        SCOPED_TRACE(device.str() + " " + std::string(kestrel::dtype_name(precision)));
        const Tensor x = random_f32({6, 40}, 21).to(device), w = random_f32({40}, 22).to(device),
                     b = random_f32({40}, 23).to(device), seed = random_f32({6, 40}, 24).to(device).to(precision);
        // y, then the gradients of x, the weight and the bias.
        auto run = [&](bool feeds_product) {
          Var input(x, true), weight(w, true), bias(b, true);
          fn::AutocastScope autocast(precision);
          const Var y = feeds_product ? fn::layer_norm(input, weight, bias, 1, 1e-5, true)
                                      : fn::cast(fn::layer_norm(input, weight, bias, 1, 1e-5), precision);
          EXPECT_EQ(y.value().dtype(), precision);
          kestrel::backward(y, seed);
          return std::vector<std::vector<float>>{y.value().to_vector<float>(), input.grad().to_vector<float>(),
                                                 weight.grad().to_vector<float>(), bias.grad().to_vector<float>()};
        };
        const auto lowered = run(true), cast = run(false);
        EXPECT_EQ(lowered[0], cast[0]) << "y";
        for (size_t k = 1; k < 4; ++k)
          for (size_t i = 0; i < cast[k].size(); ++i)
            ASSERT_NEAR(lowered[k][i], cast[k][i], 1e-6 * (1 + std::abs(cast[k][i]))) << "gradient " << k << " at " << i;
      }
    }
}

kestrel::RunConfig mlp_config(const std::string& precision, const std::string& name) {
  kestrel::RunConfig config =
      kestrel::RunConfig::load(std::string(KESTREL_SOURCE_DIR) + "/models/fashion_mlp.train.json");
  config.data.train_subset = 6000;
  config.data.test_subset = 1000;
  config.epochs = 2;
  config.backends = {"cpu"};
  config.precision = kestrel::parse_dtype(precision);
  config.out_dir = (fs::temp_directory_path() / ("kestrel_precision_" + name)).string();
  fs::remove_all(config.out_dir);
  return config;
}

kestrel::TrainOptions quiet() {
  kestrel::TrainOptions options;
  options.quiet = true;
  return options;
}

TEST(MixedPrecision, Bf16AndF16TrainTheMlpToF32sAccuracy) {
  auto run = [](const std::string& precision) {
    kestrel::Trainer trainer(mlp_config(precision, precision));
    return trainer.fit(quiet());
  };
  const kestrel::TrainSummary f32 = run("f32");
  for (const char* precision : {"bf16", "f16"}) {
    const kestrel::TrainSummary low = run(precision);
    EXPECT_NEAR(low.test.accuracy, f32.test.accuracy, 0.015) << precision;
    EXPECT_NEAR(low.test.loss, f32.test.loss, 0.03) << precision;
    EXPECT_NE(low.test.loss, f32.test.loss) << precision << " changed the arithmetic";
  }
}

// A 16-bit linear layer whose output features miss the device's preferred GEMM alignment is computed over
// padded features (zero weights) on GPUs. KESTREL_CPU_GEMM_ROW_ALIGNMENT makes the CPU ask for the same, and
// its profile shows the padded product (64 x 16 instead of 64 x 10 for the MLP's last layer): the training
// must come out as without the padding.
TEST(MixedPrecision, PaddedOutputFeaturesTrainAsUnpadded) {
  auto train = [](const std::string& env, const std::string& name) {
    const fs::path out = fs::temp_directory_path() / ("kestrel_padded_" + name);
    fs::remove_all(out);
    const CliRun run = run_cli("train " + std::string(KESTREL_SOURCE_DIR) + "/models/fashion_mlp.train.json " +
                                   "--backend cpu --precision bf16 --max-steps 20 --no-progress --out " + out.string(),
                               "KESTREL_CPU_PROFILE=1 " + env);
    EXPECT_EQ(run.status, 0) << run.output;
    std::ifstream in(out / "summary.json");
    return std::make_pair(nlohmann::json::parse(in), run.output);
  };
  const auto [plain, plain_log] = train("", "plain");
  const auto [padded, padded_log] = train("KESTREL_CPU_GEMM_ROW_ALIGNMENT=16", "padded");
  EXPECT_NE(plain_log.find("linear 64x10x256"), std::string::npos) << plain_log;
  EXPECT_NE(padded_log.find("linear 64x16x256"), std::string::npos) << padded_log;
  EXPECT_EQ(padded_log.find("linear 64x10x256"), std::string::npos) << padded_log;
  // The weight's gradient over the padded features too (its padding's rows dropped after).
  EXPECT_NE(padded_log.find("gemm 16x256x64"), std::string::npos) << padded_log;
  EXPECT_NEAR(padded["train_loss"].get<double>(), plain["train_loss"].get<double>(), 1e-6);
  EXPECT_NEAR(padded["test_loss"].get<double>(), plain["test_loss"].get<double>(), 1e-6);
  EXPECT_EQ(padded["test_accuracy"], plain["test_accuracy"]);
}

// The recurrent model files take mixed-precision steps. Their embeddings feed recurrent layers, whose
// input projections go through the table in f32 runs; under autocast they must not (the projected
// table's per-row gradient sums would be 16-bit).
TEST(MixedPrecision, RecurrentModelsOnEmbeddingsTrainInBf16AndF16) {
  for (const std::string config : {"lstm_generator", "rnn_classifier"})
    for (const std::string precision : {"bf16", "f16"}) {
      SCOPED_TRACE(config + " " + precision);
      const fs::path out = fs::temp_directory_path() / ("kestrel_recurrent_" + config + "_" + precision);
      fs::remove_all(out);
      const CliRun run = run_cli("train " + std::string(KESTREL_SOURCE_DIR) + "/models/" + config + ".train.json " +
                                 "--backend cpu --precision " + precision +
                                 " --max-steps 2 --test-subset 32 --no-progress --out " + out.string());
      ASSERT_EQ(run.status, 0) << run.output;
      std::ifstream in(out / "summary.json");
      EXPECT_TRUE(std::isfinite(nlohmann::json::parse(in)["test_loss"].get<double>()));
    }
}

std::vector<float> parameters(kestrel::Trainer& trainer) { return trainer.model().flat_parameters().to_vector<float>(); }

TEST(MixedPrecision, F16SkipsAStepWhoseGradientsOverflowAndBacksOff) {
  // 2^40 times the loss overflows f16 in the first backward product: the step must leave every weight
  // as it was and halve the scale.
  kestrel::RunConfig config = mlp_config("f16", "overflow");
  config.loss_scale.init_scale = std::ldexp(1.0, 40);
  config.max_steps = 1;
  kestrel::Trainer untouched(config), trainer(config);
  kestrel::TrainSummary one = trainer.fit(quiet());
  EXPECT_EQ(one.skipped_steps, 1);
  EXPECT_EQ(one.loss_scale, std::ldexp(1.0, 39));
  EXPECT_EQ(parameters(trainer), parameters(untouched)) << "a skipped step changes nothing";
  // Run on, the scale backs off until the gradients fit, then the run learns.
  config.max_steps = 60;
  config.out_dir += "-longer";
  fs::remove_all(config.out_dir);
  kestrel::Trainer longer(config);
  kestrel::TrainSummary summary = longer.fit(quiet());
  EXPECT_GT(summary.skipped_steps, 5);
  EXPECT_LT(summary.skipped_steps, 40);
  EXPECT_LT(summary.loss_scale, std::ldexp(1.0, 35));
  EXPECT_GT(summary.test.accuracy, 0.6);
}

TEST(MixedPrecision, F16LossScaleGrowsAndResumesExactly) {
  kestrel::RunConfig config = mlp_config("f16", "growth");
  config.loss_scale.init_scale = 1024;
  config.loss_scale.growth_interval = 4;
  config.max_steps = 10;
  config.checkpoint_every = 3;
  kestrel::Trainer straight(config);
  kestrel::TrainSummary expected = straight.fit(quiet());
  EXPECT_EQ(expected.skipped_steps, 0);
  EXPECT_EQ(expected.loss_scale, 4096) << "grown twice in 10 clean steps, every 4";
  // Killed after step 7 (its checkpoint is from step 6, 2 clean steps into the second interval).
  config.out_dir += "-resumed";
  fs::remove_all(config.out_dir);
  {
    kestrel::Trainer interrupted(config);
    kestrel::TrainOptions options = quiet();
    options.interrupt_after = 7;
    interrupted.fit(options);
  }
  kestrel::Trainer resumed(config);
  kestrel::TrainOptions options = quiet();
  options.resume = true;
  kestrel::TrainSummary got = resumed.fit(options);
  EXPECT_EQ(got.loss_scale, expected.loss_scale);
  EXPECT_EQ(parameters(resumed), parameters(straight)) << "bit for bit";
}

TEST(MixedPrecision, F16StepsAreCapturedWithSkipsAndGrowthAndMatchEagerSteps) {
  // 2^30 overflows for the first dozen or so steps, then the scale grows every 3 clean steps and
  // overflows again now and then: skips, backoffs and growth all happen inside replays.
  kestrel::RunConfig config = mlp_config("f16", "captured");
  config.loss_scale.init_scale = std::ldexp(1.0, 30);
  config.loss_scale.growth_interval = 3;
  config.max_steps = 40;
  kestrel::Trainer captured(config);
  const kestrel::TrainSummary replayed = captured.fit(quiet());
  EXPECT_EQ(replayed.replayed_steps, 39) << "every step after the warm-up one";
  EXPECT_GT(replayed.skipped_steps, 10);
  config.capture = false;
  config.out_dir += "-eager";
  fs::remove_all(config.out_dir);
  kestrel::Trainer eager(config);
  const kestrel::TrainSummary launched = eager.fit(quiet());
  EXPECT_EQ(launched.replayed_steps, 0);
  EXPECT_EQ(launched.skipped_steps, replayed.skipped_steps);
  EXPECT_EQ(launched.loss_scale, replayed.loss_scale);
  EXPECT_EQ(parameters(eager), parameters(captured)) << "bit for bit";
}

TEST(MixedPrecision, LossScalingAddsNoWaitForTheDevicePerStep) {
  kestrel::Engine& engine = kestrel::Engine::global();
  auto waits = [&](const std::string& precision) {
    kestrel::RunConfig config = mlp_config(precision, "waits_" + precision);
    config.loss_scale.init_scale = std::ldexp(1.0, 24);  // some steps overflow and are skipped
    config.max_steps = 60;
    config.log_every = 1000;
    kestrel::Trainer trainer(config);
    const int64_t before = engine.synchronizations(trainer.model().device());
    const kestrel::TrainSummary summary = trainer.fit(quiet());
    if (precision == "f16") EXPECT_GT(summary.skipped_steps, 0);
    return engine.synchronizations(trainer.model().device()) - before;
  };
  const int64_t bf16 = waits("bf16"), f16 = waits("f16");
  // f16 reads its scale once for the final report and once for the checkpoint: not once a step.
  EXPECT_LE(f16, bf16 + 3) << "f16 waited " << f16 << " times in 60 steps, bf16 " << bf16;
}

// The same short run on the CPU and on Vulkan (lavapipe here): both round the products' operands to the
// 16-bit format with kestrel/half.h's rule and accumulate in f32, so only summation order differs. That
// order can flip an operand's rounding, which moves it by one unit of the format (bf16 2^-8, f16 2^-10
// relative), and the run compounds such flips: on NVIDIA's Vulkan driver bf16's test loss ended 0.24% from
// the CPU's (lavapipe's is closer), so bf16 is allowed about one unit, f16 a fifth of one.
TEST(MixedPrecision, VulkanTrainsInBf16AndF16AsTheCpuDoes) {
  kestrel::Engine& engine = kestrel::Engine::global();
  if (engine.device_count("vulkan") == 0) GTEST_SKIP() << "no Vulkan device";
  auto run = [](const std::string& backend, const std::string& precision) {
    kestrel::RunConfig config = mlp_config(precision, backend + "_" + precision);
    config.backends = {backend};
    config.fallback = "error";
    config.data.train_subset = 640;
    config.data.test_subset = 200;
    config.epochs = 1;
    kestrel::Trainer trainer(config);
    return trainer.fit(quiet());
  };
  const kestrel::TrainSummary f32 = run("vulkan", "f32");
  for (const char* precision : {"bf16", "f16"}) {
    const kestrel::TrainSummary cpu = run("cpu", precision), vulkan = run("vulkan", precision);
    EXPECT_EQ(vulkan.device, "vulkan:0");
    const double tolerance = std::string(precision) == "bf16" ? 4e-3 : 2e-3;
    EXPECT_NEAR(vulkan.test.loss, cpu.test.loss, tolerance * cpu.test.loss) << precision;
    EXPECT_NE(vulkan.test.loss, f32.test.loss) << precision << " changed the arithmetic";
  }
}

TEST(MixedPrecision, ADeviceThatCannotMultiplyInBf16IsRefusedByName) {
  if (kestrel::Engine::global().device_count("vulkan") == 0) GTEST_SKIP() << "no Vulkan device";
  // Vulkan without 16-bit storage (the switch makes lavapipe one) has no 16-bit dtype.
  const std::string config = (fs::temp_directory_path() / "kestrel_precision_refused.json").string();
  {
    std::ofstream out(config);
    out << R"({"model": ")" << KESTREL_SOURCE_DIR << R"(/models/fashion_mlp.json",
               "data": {"dataset": "fashion-mnist", "train_subset": 64, "test_subset": 64},
               "loss": "cross_entropy", "batch_size": 32, "epochs": 1, "precision": "bf16",
               "backend": {"preference": ["vulkan"], "fallback": "error"}, "out": ")"
        << (fs::temp_directory_path() / "kestrel_precision_refused").string() << R"("})";
  }
  const CliRun r = run_cli("train " + config + " --quiet", "KESTREL_VULKAN_DISABLE_F16=1");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("/precision: vulkan:0 cannot multiply in bf16"), std::string::npos) << r.output;
}

}  // namespace
