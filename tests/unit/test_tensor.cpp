// The public tensor API: creation, host round trips, views, casts, devices and memory statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "kestrel/engine.h"
#include "kestrel/half.h"
#include "kestrel/error.h"
#include "kestrel/ops.h"

namespace {

using kestrel::DType;
using kestrel::Tensor;

kestrel::Engine& engine() {
  // Two CPU devices, so copies and mismatches between devices can be tested without a GPU.
  static kestrel::Engine* instance = [] {
    setenv("KESTREL_CPU_DEVICES", "2", 1);
    return new kestrel::Engine();
  }();
  return *instance;
}

kestrel::Device cpu(int index = 0) { return engine().device("cpu:" + std::to_string(index)); }

TEST(Tensor, HostRoundTripAndMetadata) {
  auto t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, cpu());
  EXPECT_EQ(t.shape(), (kestrel::Shape{2, 3}));
  EXPECT_EQ(t.strides(), (kestrel::Shape{3, 1}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "Tensor(f32, (2, 3), cpu:0)");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(Tensor::from_vector<float>({1, 2}, {3}, cpu()), kestrel::InvalidArgument);
}

TEST(Tensor, ViewsShareStorageAndReadBackInLogicalOrder) {
  auto t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}, cpu());
  auto tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.shape(), (kestrel::Shape{4, 3}));
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(t.slice(1, 1, 4, 2).to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(t.select(0, 2).to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_EQ(t.slice(0, -1, 3).to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_EQ(t.view({2, -1}).shape(), (kestrel::Shape{2, 6}));
  EXPECT_THROW(tt.view({12}), kestrel::InvalidArgument);
  EXPECT_EQ(tt.reshape({12}).to_vector<float>(), tt.to_vector<float>());
  auto row = t.select(0, 0).unsqueeze(0).expand({2, 4});
  EXPECT_EQ(row.strides()[0], 0);
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 0, 1, 2, 3}));
  // Writing through a view changes the base tensor.
  auto column = t.slice(1, 0, 1);
  kestrel::ops::fill_(column, -1);
  EXPECT_EQ(t.to_vector<float>()[4], -1);
  EXPECT_THROW(t.as_strided({4, 4}, {4, 1}, 0), kestrel::InvalidArgument);
}

// unflatten splits one dim into several as a view, also of a strided tensor (the columns of a packed
// projection into heads): element (i, h, d) is the original's (i, h * depth + d).
TEST(Tensor, UnflattenSplitsADimAsAView) {
  std::vector<float> values(24);
  std::iota(values.begin(), values.end(), 0.0f);
  auto t = Tensor::from_vector(values, {2, 12}, cpu());
  auto columns = t.slice(1, 4, 10);         // (2, 6), row stride 12
  auto heads = columns.unflatten(1, {3, 2});  // (2, 3, 2)
  EXPECT_EQ(heads.shape(), (kestrel::Shape{2, 3, 2}));
  EXPECT_EQ(heads.strides(), (kestrel::Shape{12, 2, 1}));
  EXPECT_EQ(heads.storage(), t.storage());
  EXPECT_EQ(heads.to_vector<float>(), (std::vector<float>{4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21}));
  EXPECT_EQ(t.unflatten(-1, {3, 4}).permute({0, 2, 1}).contiguous().to_vector<float>()[1], 4.0f);
  EXPECT_THROW(t.unflatten(1, {5, 2}), kestrel::InvalidArgument);
}

TEST(Tensor, DtypeConversion) {
  auto t = Tensor::from_vector<float>({1.5f, -2.25f, 100.75f}, {3}, cpu());
  EXPECT_EQ(t.to(DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 100}));
  EXPECT_EQ(t.to(DType::f16).to(DType::f32).to_vector<float>(), (std::vector<float>{1.5f, -2.25f, 100.75f}));
  EXPECT_EQ(t.to(DType::bf16).to_vector<float>(), (std::vector<float>{1.5f, -2.25f, 101.0f}));  // 100.75 ties to even
  EXPECT_EQ(t.to(DType::f64).to_vector<double>(), (std::vector<double>{1.5, -2.25, 100.75}));
  // As torch's .to(): the tensor itself where nothing changes; clone() is the copy.
  EXPECT_EQ(t.to(DType::f32).storage(), t.storage());
  EXPECT_NE(t.clone().storage(), t.storage());
  EXPECT_EQ(t.clone().to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(kestrel::parse_dtype("bfloat16"), DType::bf16);
  EXPECT_THROW(kestrel::parse_dtype("f8"), kestrel::InvalidArgument);
}

TEST(Tensor, CopiesBetweenDevices) {
  auto a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, cpu(0));
  auto b = a.transpose(0, 1).to(cpu(1));
  EXPECT_EQ(b.device(), cpu(1));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(a.to(cpu(0)).storage(), a.storage());  // same device: no copy, as torch
  Tensor c = Tensor::zeros({3, 2}, DType::f64, cpu(0));
  c.copy_from(b);
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(Tensor, OpsOnDifferentDevicesNameBothDevices) {
  auto a = Tensor::from_vector<float>({1, 2}, {2}, cpu(0));
  auto b = Tensor::from_vector<float>({3, 4}, {2}, cpu(1));
  try {
    kestrel::ops::binary(KESTREL_BINARY_ADD, a, b);
    FAIL() << "mixed devices were accepted";
  } catch (const kestrel::DeviceMismatch& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("cpu:0"), std::string::npos) << message;
    EXPECT_NE(message.find("cpu:1"), std::string::npos) << message;
    EXPECT_NE(message.find(".to(device)"), std::string::npos) << message;
  }
  EXPECT_EQ(kestrel::ops::binary(KESTREL_BINARY_ADD, a, b.to(cpu(0))).to_vector<float>(), (std::vector<float>{4, 6}));
}

// Two devices of one process multiplying at once, a thread each (as a two-device run's ranks do), get
// the products each gets alone. OpenBLAS's OpenMP build gave both callers the same work buffers, and
// some of these products came out wrong before the plugin took turns at BLAS.
TEST(Tensor, ProductsOnTwoDevicesAtOnceMatchProductsAlone) {
  auto matrix = [](int64_t rows, int64_t cols, size_t seed, const kestrel::Device& device) {
    std::vector<float> v(size_t(rows * cols));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7919 + seed * 131) % 97) / 97.0f - 0.5f;
    return Tensor::from_vector<float>(v, {rows, cols}, device);
  };
  // (M, K, N) on each device: a product OpenBLAS splits over its threads, one the plugin splits into two
  // column halves on its own threads (ops_gemm.cpp), and one small enough for one thread.
  const int64_t shapes[3][3] = {{320, 320, 320}, {64, 256, 256}, {48, 48, 48}};
  std::vector<std::vector<float>> alone[2];
  std::vector<std::pair<Tensor, Tensor>> operands[2];
  for (int d = 0; d < 2; ++d)
    for (const auto& s : shapes) {
      operands[d].push_back({matrix(s[0], s[1], size_t(d + 1), cpu(d)), matrix(s[1], s[2], size_t(d + 5), cpu(d))});
      alone[d].push_back(kestrel::ops::matmul(operands[d].back().first, operands[d].back().second).to_vector<float>());
    }
  int wrong[2] = {0, 0};
  auto run = [&](int d) {
    for (int round = 0; round < 100; ++round)
      for (size_t i = 0; i < operands[d].size(); ++i)
        if (kestrel::ops::matmul(operands[d][i].first, operands[d][i].second).to_vector<float>() != alone[d][i]) ++wrong[d];
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  EXPECT_EQ(wrong[0], 0);
  EXPECT_EQ(wrong[1], 0);
}

TEST(Tensor, ShapeAndDtypeErrorsAreClear) {
  auto a = Tensor::zeros({2, 3}, DType::f32, cpu());
  auto b = Tensor::zeros({4, 3}, DType::f32, cpu());
  EXPECT_THROW(kestrel::ops::binary(KESTREL_BINARY_ADD, a, b), kestrel::InvalidArgument);
  EXPECT_THROW(kestrel::ops::matmul(a, b), kestrel::InvalidArgument);
  EXPECT_THROW(kestrel::ops::binary(KESTREL_BINARY_ADD, a, a.to(DType::f64)), kestrel::InvalidArgument);
  EXPECT_THROW(kestrel::ops::reduce(KESTREL_REDUCE_SUM, a, {5}), kestrel::InvalidArgument);
  EXPECT_EQ(kestrel::ops::broadcast_shapes({3, 1}, {4}), (kestrel::Shape{3, 4}));
}

// f16 loss scaling's check of the flat gradients (one MAX_ABS reduction where the device has it): an
// overflow of either sign or a NaN anywhere in a long run is found, in f32 and f16 gradients alike, on
// the CPU and (where there is one) a Vulkan device.
TEST(Tensor, NonfiniteFlagFindsEitherInfinityOrANanAnywhere) {
  std::vector<kestrel::Device> devices = {cpu()};
  if (engine().device_count("vulkan") > 0) devices.push_back(engine().device("vulkan"));
  const float odd[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (const kestrel::Device& device : devices)
    for (DType dtype : {DType::f32, DType::f16}) {
      std::vector<float> values(100003);
      for (size_t i = 0; i < values.size(); ++i) values[i] = float(int(i % 13) - 6) * 0.25f;
      const auto flag = [&] {
        return kestrel::ops::nonfinite_flag(Tensor::from_vector(values, {int64_t(values.size())}, device).to(dtype))
            .to_doubles()[0];
      };
      EXPECT_EQ(flag(), 0.0) << device.str() << " " << kestrel::dtype_name(dtype);
      for (float v : odd)
        for (size_t at : {size_t(0), size_t(77777), values.size() - 1}) {
          const float kept = values[at];
          values[at] = v;
          EXPECT_EQ(flag(), 1.0) << device.str() << " " << kestrel::dtype_name(dtype) << ": " << v << " at " << at;
          values[at] = kept;
        }
      EXPECT_EQ(kestrel::ops::nonfinite_flag(Tensor::zeros({0}, dtype, device)).to_doubles()[0], 0.0);
    }
  // Longer than one pass of the Vulkan plugin's reduction reached (4M elements; a model's flat gradients
  // often are): folded in splits, the overflow in the last one.
  for (const kestrel::Device& device : devices) {
    std::vector<float> values((size_t(1) << 22) + 3, 0.5f);
    EXPECT_EQ(kestrel::ops::nonfinite_flag(Tensor::from_vector(values, {int64_t(values.size())}, device)).to_doubles()[0],
              0.0);
    values.back() = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(kestrel::ops::nonfinite_flag(Tensor::from_vector(values, {int64_t(values.size())}, device)).to_doubles()[0],
              1.0)
        << device.str();
  }
}

// Gradient clipping's squared norm: one SUM_SQUARES reduction where the device has it (ABI 1.17), else the
// squares summed in slices (every op composed). Both agree with a double-precision sum, over a long run,
// a transposed view and nothing at all, on the CPU and (where there is one) a Vulkan device.
TEST(Tensor, SumOfSquaresMatchesTheSquaresSummedEitherWay) {
  std::vector<kestrel::Device> devices = {cpu()};
  if (engine().device_count("vulkan") > 0) devices.push_back(engine().device("vulkan"));
  std::vector<float> values(300007);
  double want = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = float(int(i % 29) - 14) * 0.125f;
    want += double(values[i]) * double(values[i]);
  }
  for (const kestrel::Device& device : devices)
    for (bool one_pass : {true, false}) {
      SCOPED_TRACE(device.str() + (one_pass ? " one pass" : " composed"));
      const kestrel::ops::FusedOpsScope fused_ops(one_pass);
      const Tensor x = Tensor::from_vector(values, {int64_t(values.size())}, device);
      EXPECT_NEAR(kestrel::ops::sum_of_squares(x).to_doubles()[0], want, 1e-6 * want);
      const Tensor matrix = Tensor::from_vector(std::vector<float>(values.begin(), values.begin() + 600), {20, 30}, device);
      double matrix_want = 0;
      for (size_t i = 0; i < 600; ++i) matrix_want += double(values[i]) * double(values[i]);
      EXPECT_NEAR(kestrel::ops::sum_of_squares(matrix.transpose(0, 1)).to_doubles()[0], matrix_want, 1e-6 * matrix_want);
      EXPECT_EQ(kestrel::ops::sum_of_squares(Tensor::zeros({0}, DType::f32, device)).to_doubles()[0], 0.0);
      EXPECT_EQ(kestrel::ops::sum_of_squares_temporary_bytes(x) == 0, one_pass) << "CPU and Vulkan have the one pass";
    }
  EXPECT_THROW(kestrel::ops::sum_of_squares(Tensor::zeros({3}, DType::i64, cpu())), kestrel::InvalidArgument);
}

// Casts between f32 and f16 on the CPU (eight at a time through F16C where the CPU has it) give
// kestrel/half.h's bits: every f16 value and the midpoints around each (round to nearest even), subnormals,
// overflow, signed zeros, infinities and NaNs, and a million f32 bit patterns at random.
TEST(Tensor, CastsBetweenF32AndF16GiveHalfHsBits) {
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = kestrel_f16_to_f32(uint16_t(bits));
    values.push_back(f);
    if (std::isfinite(f)) {  // halfway to the next f16 up, and a hair either side of it
      const float next = kestrel_f16_to_f32(uint16_t(bits + 1));
      const float mid = f + (next - f) / 2;
      values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)});
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    values.push_back(f);
  }
  values.insert(values.end(), {65519.0f, 65520.0f, -65520.0f, 1e-8f, -0.0f, INFINITY, -INFINITY, NAN, -NAN});
  const int64_t n = int64_t(values.size());
  const Tensor narrow = Tensor::from_vector(values, {n}, cpu()).to(DType::f16);
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  narrow.copy_to_host(bits.data());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(bits[size_t(i)], kestrel_f32_to_f16(values[size_t(i)])) << "f32 " << values[size_t(i)] << " at " << i;
  std::vector<uint16_t> every(0x10000);
  for (uint32_t b = 0; b < 0x10000; ++b) every[b] = uint16_t(b);
  const std::vector<float> wide = Tensor::from_host(every.data(), {0x10000}, DType::f16, cpu()).to_vector<float>();
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float want = kestrel_f16_to_f32(uint16_t(b));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(wide[b])) << std::hex << b;
    else ASSERT_EQ(std::memcmp(&wide[b], &want, sizeof want), 0) << std::hex << b;
  }
}

TEST(Tensor, MemoryStatisticsFollowAllocations) {
  kestrel::Device device = cpu();
  auto before = engine().memory_stats(device);
  engine().reset_peak_memory_stats(device);
  {
    auto t = Tensor::empty({1024, 256}, DType::f32, device);
    auto during = engine().memory_stats(device);
    EXPECT_EQ(during.allocated, before.allocated + 1024 * 256 * 4);
    EXPECT_EQ(during.alloc_count, before.alloc_count + 1);
  }
  auto after = engine().memory_stats(device);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.peak_allocated, before.allocated + 1024 * 256 * 4);
  EXPECT_GE(after.reserved, after.allocated + 1024 * 256 * 4);  // the freed block stays cached
  engine().empty_cache(device);
  EXPECT_EQ(engine().memory_stats(device).reserved, engine().memory_stats(device).allocated);
  engine().reset_peak_memory_stats(device);
  EXPECT_EQ(engine().memory_stats(device).peak_allocated, after.allocated);
  auto info = engine().properties(device);
  EXPECT_GT(info.memory_total, 0u);
  EXPECT_NE(info.runtime.find("Kokkos"), std::string::npos);
}

}  // namespace
