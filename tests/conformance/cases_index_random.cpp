// gather / scatter_add and the counter-based random draws.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"
#include "kestrel/error.h"
#include "kestrel/philox.h"

namespace kestrel::conformance {

namespace {

struct IndexSetup {
  Shape data, index;
  int axis;
  Layout layout;
};

const std::vector<IndexSetup>& index_setups() {
  static const std::vector<IndexSetup> setups = {{{4, 6}, {4, 3}, 1, Layout::contiguous},
                                                 {{4, 6}, {2, 6}, 0, Layout::contiguous},
                                                 {{4, 6}, {4, 3}, 1, Layout::strided},
                                                 {{2, 3, 4}, {2, 3, 5}, 2, Layout::contiguous},
                                                 {{2, 3, 4}, {2, 2, 4}, 1, Layout::transposed}};
  return setups;
}

std::vector<double> random_indices(Runner& r, int64_t count, int64_t extent) {
  auto raw = r.values(count, 0, static_cast<double>(extent), DType::i64);
  for (double& v : raw) v = std::min<double>(v, extent - 1);
  return raw;
}

// Position in `data_shape` that element `i` of the index tensor points at.
int64_t indexed_position(int64_t i, const Shape& index_shape, const Shape& data_shape, int axis,
                         const std::vector<double>& index) {
  auto position = unravel(i, index_shape);
  position[axis] = static_cast<int64_t>(index[i]);
  return ravel(position, data_shape);
}

}  // namespace

void index_cases(Runner& r) {
  for (DType dtype : all_dtypes)
    for (DType index_dtype : {DType::i64, DType::i32})
      for (const auto& s : index_setups()) {
        std::string shapes = shape_str(s.data) + fmt::format("-axis{}-", s.axis) + shape_str(s.index);
        bool required = r.required(dtype == DType::f32 && index_dtype == DType::i64, {dtype, index_dtype});
        r.run(case_name({"gather", std::string(dtype_name(dtype)), std::string(dtype_name(index_dtype)), shapes,
                         layout_name(s.layout)}),
              required, [&] {
                auto data = r.values(shape_numel(s.data), 0, 50, dtype);
                auto index = random_indices(r, shape_numel(s.index), s.data[s.axis]);
                Tensor out = ops::gather(r.upload(s.data, data, dtype, s.layout), s.axis,
                                         r.upload(s.index, index, index_dtype));
                std::vector<double> want;
                for (int64_t i = 0; i < shape_numel(s.index); ++i)
                  want.push_back(data[indexed_position(i, s.index, s.data, s.axis, index)]);
                r.expect_close(out, want, Tolerance{0, 0});
              });
        r.run(case_name({"scatter_add", std::string(dtype_name(dtype)), std::string(dtype_name(index_dtype)), shapes,
                         layout_name(s.layout)}),
              required, [&] {
                auto base = r.values(shape_numel(s.data), 0, 20, dtype);
                auto src = r.values(shape_numel(s.index), 0, 20, dtype);
                auto index = random_indices(r, shape_numel(s.index), s.data[s.axis]);
                Tensor out = r.upload(s.data, base, dtype);
                ops::scatter_add_(out, s.axis, r.upload(s.index, index, index_dtype),
                                  r.upload(s.index, src, dtype, s.layout));
                std::vector<double> want = base;
                for (int64_t i = 0; i < shape_numel(s.index); ++i)
                  want[indexed_position(i, s.index, s.data, s.axis, index)] += src[i];
                for (double& w : want) w = round_to(dtype, w);
                r.expect_close(out, want, tolerance_for(dtype, 4));
              });
      }
  // An embedding's index: each row one token id repeated along the row (stride 0), so whole table rows
  // are read, and summed back, ids repeating.
  const Shape table{5, 7}, rows{9, 7};
  for (DType dtype : all_dtypes)
    for (DType index_dtype : {DType::i64, DType::i32}) {
      const bool required = r.required(dtype == DType::f32 && index_dtype == DType::i64, {dtype, index_dtype});
      auto ids = random_indices(r, rows[0], table[0]);
      auto repeated = [&] { return r.upload({rows[0], 1}, ids, index_dtype).expand(rows); };  // strides (1, 0)
      const std::string name = fmt::format("{}/{}/embedding-rows", dtype_name(dtype), dtype_name(index_dtype));
      r.run("gather/" + name, required, [&] {
        auto data = r.values(shape_numel(table), 0, 50, dtype);
        std::vector<double> want;
        for (int64_t i = 0; i < shape_numel(rows); ++i) want.push_back(data[int64_t(ids[i / rows[1]]) * table[1] + i % rows[1]]);
        r.expect_close(ops::gather(r.upload(table, data, dtype), 0, repeated()), want, Tolerance{0, 0});
      });
      r.run("scatter_add/" + name, required, [&] {
        auto base = r.values(shape_numel(table), 0, 20, dtype), src = r.values(shape_numel(rows), 0, 20, dtype);
        Tensor out = r.upload(table, base, dtype);
        ops::scatter_add_(out, 0, repeated(), r.upload(rows, src, dtype));
        std::vector<double> want = base;
        for (int64_t i = 0; i < shape_numel(rows); ++i) want[int64_t(ids[i / rows[1]]) * table[1] + i % rows[1]] += src[i];
        for (double& w : want) w = round_to(dtype, w);
        r.expect_close(out, want, tolerance_for(dtype, 4));
      });
    }
  // A bad index is a clear error, never a crash or a silent write.
  r.run("gather/out-of-range-index", r.required(true, {DType::f32, DType::i64}), [&] {
    Tensor data = r.upload({2, 3}, {1, 2, 3, 4, 5, 6}, DType::f32);
    try {
      ops::gather(data, 1, r.upload({2, 1}, {0, 3}, DType::i64)).to_doubles();
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("out of range") == std::string::npos)
        throw CaseFailure(std::string("the error does not say the index is out of range: ") + e.what());
      return;
    }
    throw CaseFailure("index 3 on an axis of size 3 was accepted");
  });
}

void random_cases(Runner& r) {
  auto philox_word = [](uint64_t seed, uint64_t block, int lane) { return kestrel_philox4x32_10(seed, block).v[lane]; };
  for (DType dtype : all_dtypes) {
    bool is_float = is_floating(dtype);
    for (Shape shape : {Shape{1000}, Shape{7, 13}, Shape{0}})
      // Counters crossing 2^32 (the block's high word changes) and wrapping past 2^64.
      for (uint64_t offset : {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 32) - 5, ~uint64_t{0} - 40}) {
        const uint64_t seed = 0x5eed1234abcdULL;
        std::string where = shape_str(shape) + fmt::format("/offset{}", offset);
        if (is_float)
          r.run(case_name({"uniform", std::string(dtype_name(dtype)), where}), r.required(dtype == DType::f32, {dtype}), [&] {
            Tensor t = Tensor::empty(shape, dtype, r.device());
            ops::random_(t, KESTREL_DISTRIBUTION_UNIFORM, seed, offset, -2.0, 3.0);
            std::vector<double> want;
            for (int64_t i = 0; i < t.numel(); ++i)
              want.push_back(round_to(dtype, -2.0 + 5.0 * kestrel_philox_unit(philox_word(seed, offset + i / 4, i % 4))));
            r.expect_close(t, want, tolerance_for(dtype));
          });
        if (is_float)
          r.run(case_name({"normal", std::string(dtype_name(dtype)), where}), r.required(dtype == DType::f32, {dtype}), [&] {
            Tensor t = Tensor::empty(shape, dtype, r.device());
            ops::random_(t, KESTREL_DISTRIBUTION_NORMAL, seed, offset, 1.0, 2.0);
            std::vector<double> want;
            for (int64_t i = 0; i < t.numel(); ++i) {
              int lane = 2 * static_cast<int>(i % 2);
              double u1 = kestrel_philox_unit(philox_word(seed, offset + i / 2, lane)) + 1.0 / 16777216.0;
              double u2 = kestrel_philox_unit(philox_word(seed, offset + i / 2, lane + 1));
              want.push_back(round_to(dtype, 1.0 + 2.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2)));
            }
            r.expect_close(t, want, tolerance_for(dtype, 8));
          });
        if (is_float || dtype == DType::u8)
          r.run(case_name({"bernoulli", std::string(dtype_name(dtype)), where}), r.required(dtype == DType::f32, {dtype}),
                [&] {
            Tensor t = Tensor::empty(shape, dtype, r.device());
            ops::random_(t, KESTREL_DISTRIBUTION_BERNOULLI, seed, offset, 0.3, 0.0);
            std::vector<double> want;
            for (int64_t i = 0; i < t.numel(); ++i)
              want.push_back(kestrel_philox_bernoulli(philox_word(seed, offset + i / 4, i % 4), 0.3));
            r.expect_close(t, want, Tolerance{0, 0});  // masks must be bit-identical on every backend
          });
      }
  }
  // The draws have the right moments (a check of the generator and of the element-to-counter mapping).
  r.run("moments/f32", r.required(true, {DType::f32}), [&] {
    const int64_t n = 200000;
    Tensor t = Tensor::empty({n}, DType::f32, r.device());
    auto moments = [&](kestrel_distribution d, double a, double b) {
      ops::random_(t, d, 42, 0, a, b);
      double sum = 0, sq = 0;
      for (double v : t.to_doubles()) {
        sum += v;
        sq += v * v;
      }
      double mean = sum / n;
      return std::pair{mean, std::sqrt(sq / n - mean * mean)};
    };
    auto check = [](const char* what, double got, double want, double tol) {
      if (std::abs(got - want) > tol) throw CaseFailure(fmt::format("{} is {:.4f}, expected {:.4f}", what, got, want));
    };
    auto [um, us] = moments(KESTREL_DISTRIBUTION_UNIFORM, 0, 1);
    check("uniform mean", um, 0.5, 0.005);
    check("uniform std", us, std::sqrt(1.0 / 12), 0.005);
    auto [nm, ns] = moments(KESTREL_DISTRIBUTION_NORMAL, 0, 1);
    check("normal mean", nm, 0.0, 0.01);
    check("normal std", ns, 1.0, 0.01);
    auto [bm, bs] = moments(KESTREL_DISTRIBUTION_BERNOULLI, 0.3, 0);
    check("bernoulli mean", bm, 0.3, 0.005);
  });
}

}  // namespace kestrel::conformance
