// Reductions and matrix products.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

std::string dims_str(const std::vector<int>& dims) {
  return dims.empty() ? std::string("all") : fmt::format("dims{}", fmt::join(dims, ""));
}

// Reference reduction of row-major `values` of `shape` over `dims` (all when empty), keepdim shape.
std::vector<double> reduce_reference(kestrel_reduce_fn fn, const std::vector<double>& values, const Shape& shape,
                                     const std::vector<int>& dims) {
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (int d : dims) reduced[d] = true;
  Shape out_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) out_shape[d] = 1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> groups(shape_numel(out_shape));
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    auto index = unravel(i, shape);
    for (size_t d = 0; d < shape.size(); ++d)
      if (reduced[d]) index[d] = 0;
    groups[ravel(index, out_shape)].push_back(values[i]);
  }
  std::vector<double> out;
  for (const auto& g : groups) {
    double acc = 0;
    switch (fn) {
      case KESTREL_REDUCE_SUM: for (double v : g) acc += v; break;
      case KESTREL_REDUCE_MEAN: for (double v : g) acc += v; acc = g.empty() ? nan : acc / g.size(); break;
      case KESTREL_REDUCE_SUM_SQUARES: for (double v : g) acc += v * v; break;
      case KESTREL_REDUCE_MAX:
      case KESTREL_REDUCE_MIN:
        acc = g.front();
        for (double v : g)
          acc = std::isnan(acc) || std::isnan(v) ? nan : (fn == KESTREL_REDUCE_MAX ? std::max(acc, v) : std::min(acc, v));
        break;
      case KESTREL_REDUCE_MAX_ABS:
        for (double v : g) acc = std::isnan(acc) || std::isnan(v) ? nan : std::max(acc, std::fabs(v));
        break;
      case KESTREL_REDUCE_ARGMAX: {
        size_t best = 0;
        for (size_t j = 0; j < g.size() && !std::isnan(g[best]); ++j)
          if (g[j] > g[best] || std::isnan(g[j])) best = j;
        acc = static_cast<double>(best);
        break;
      }
    }
    out.push_back(acc);
  }
  return out;
}

}  // namespace

void reduce_cases(Runner& r) {
  struct Setup {
    Shape shape;
    std::vector<int> dims;
    Layout layout;
  };
  const std::vector<Setup> setups = {
      {{5, 7}, {}, Layout::contiguous},     {{5, 7}, {0}, Layout::contiguous},    {{5, 7}, {1}, Layout::strided},
      {{5, 7}, {1}, Layout::transposed},    {{3, 4, 5}, {0, 2}, Layout::contiguous}, {{3, 4, 5}, {1}, Layout::strided},
      {{3, 4, 5}, {2}, Layout::contiguous}, {{1000}, {0}, Layout::contiguous},    {{0, 3}, {0}, Layout::contiguous},
      // long axes: a backend must not walk them in one thread of limited loop length
      {{70000}, {0}, Layout::contiguous},   {{3, 40000}, {1}, Layout::strided},
      // long enough for a backend to fold splits of each row separately, the last split short
      {{3, 70001}, {1}, Layout::strided},
      // column sums large enough to be split over threads (bias gradients)
      {{300, 700}, {0}, Layout::contiguous},
      // columns a whole number of 16-byte packs of every dtype, rows past any split's four-row steps
      {{1001, 64}, {0}, Layout::contiguous},
      // columns that end inside a pack, rows 64 apart (an output layer's bias gradient from logits in
      // rows padded for the product, GPT-2's 50257 in 50264)
      {{1001, 61}, {0}, Layout::padded},
      // a convolution's bias gradient: over N and the contiguous H*W, channels kept
      {{6, 4, 131}, {0, 2}, Layout::contiguous}};
  for (int f = KESTREL_REDUCE_SUM; f <= KESTREL_REDUCE_SUM_SQUARES; ++f) {
    auto fn = static_cast<kestrel_reduce_fn>(f);
    const bool squares = fn == KESTREL_REDUCE_SUM_SQUARES, adds = fn == KESTREL_REDUCE_SUM || fn == KESTREL_REDUCE_MEAN || squares;
    for (DType dtype : all_dtypes) {
      // like torch: mean of integers is an error; MAX_ABS (ABI 1.11) is for loss scaling's float gradients,
      // SUM_SQUARES (1.17) for gradient clipping's, and optional: the engine squares and sums without it
      if ((fn == KESTREL_REDUCE_MEAN || fn == KESTREL_REDUCE_MAX_ABS || squares) && !is_floating(dtype)) continue;
      bool required = r.required(!squares && (dtype == DType::f32 || dtype == DType::i64), {dtype});
      for (const auto& [shape, dims, layout] : setups) {
        bool empty = shape_numel(shape) == 0;
        if (empty && !adds) continue;
        if (fn == KESTREL_REDUCE_ARGMAX && dims.size() != 1) continue;
        for (bool keepdim : {false, true}) {
          if (keepdim && fn == KESTREL_REDUCE_ARGMAX) continue;
          r.run(case_name({reduce_fn_name(fn), std::string(dtype_name(dtype)), shape_str(shape), dims_str(dims),
                           layout_name(layout), keepdim ? "keepdim" : "squeeze"}),
                required, [&] {
                  // squares of 70000 elements within f16's range
                  double lo = dtype == DType::u8 ? 0 : squares ? -1.5 : -3, hi = dtype == DType::u8 ? 5 : squares ? 1.5 : 3;
                  auto values = r.values(shape_numel(shape), lo, hi, dtype);
                  Tensor out = ops::reduce(fn, r.upload(shape, values, dtype, layout), dims, keepdim);
                  auto want = reduce_reference(fn, values, shape, dims);
                  int64_t count = shape_numel(shape) / std::max<int64_t>(1, static_cast<int64_t>(want.size()));
                  bool exact = !adds;
                  if (fn != KESTREL_REDUCE_ARGMAX)
                    for (double& w : want) w = round_to(dtype, w);
                  r.expect_close(out, want, exact ? Tolerance{0, 0} : tolerance_for(dtype, 2 * std::sqrt(count + 1.0)));
                });
        }
      }
      if (!is_floating(dtype)) continue;
      r.run(case_name({reduce_fn_name(fn), std::string(dtype_name(dtype)), "nan"}), r.required(!squares && dtype == DType::f32, {dtype}),
            [&] {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        std::vector<double> values = {1, nan, 3, 2, 5, 4};
        Tensor out = ops::reduce(fn, r.upload({2, 3}, values, dtype), {1});
        r.expect_close(out, reduce_reference(fn, values, {2, 3}, {1}), tolerance_for(dtype));
      });
      // The NaN far into a long row: in another thread's share, another subgroup of a device's workgroup.
      r.run(case_name({reduce_fn_name(fn), std::string(dtype_name(dtype)), "nan at 250 of 300"}),
            r.required(!squares && dtype == DType::f32, {dtype}), [&] {
        std::vector<double> values(600);
        for (size_t i = 0; i < values.size(); ++i) values[i] = double(int(i % 7) - 3);
        values[250] = std::numeric_limits<double>::quiet_NaN();
        Tensor out = ops::reduce(fn, r.upload({2, 300}, values, dtype), {1});
        r.expect_close(out, reduce_reference(fn, values, {2, 300}, {1}), tolerance_for(dtype, 2 * std::sqrt(301.0)));
      });
      // Loss scaling's check: one output over a long contiguous run (a flat gradient), where a backend
      // folds pieces on separate threads or blocks, with an overflow or a NaN in a late piece.
      if ((adds && !squares) || fn == KESTREL_REDUCE_ARGMAX) continue;
      // Columns of one sign over 4225 rows, which a backend may cut into splits (66 of 65 rows left the
      // last one empty on CUDA): a fold that starts a split from 0 instead of its first element shows.
      if (fn != KESTREL_REDUCE_MAX_ABS && !squares)
        r.run(case_name({reduce_fn_name(fn), std::string(dtype_name(dtype)), "(4225,64)", "columns of one sign"}),
              r.required(dtype == DType::f32, {dtype}), [&] {
          const bool max = fn == KESTREL_REDUCE_MAX;
          std::vector<double> values = r.values(4225 * 64, max ? -3 : 1, max ? -1 : 3, dtype);
          Tensor out = ops::reduce(fn, r.upload({4225, 64}, values, dtype), {0});
          r.expect_close(out, reduce_reference(fn, values, {4225, 64}, {0}), Tolerance{0, 0});
        });
      for (double odd : {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
        r.run(case_name({reduce_fn_name(fn), std::string(dtype_name(dtype)), "200000",
                         std::isnan(odd) ? "nan at 150000" : "-inf at 150000"}),
              r.required(!squares && dtype == DType::f32, {dtype}), [&] {
          std::vector<double> values = r.values(200000, -3, 3, dtype);
          values[150000] = odd;
          Tensor out = ops::reduce(fn, r.upload({200000}, values, dtype), {0});
          r.expect_close(out, reduce_reference(fn, values, {200000}, {0}), Tolerance{0, 0});
        });
      }
    }
  }
}

void gemm_cases(Runner& r) {
  struct Setup {
    int64_t m, k, n;
    Layout a, b, c = Layout::contiguous;
  };
  const std::vector<Setup> setups = {
      {1, 1, 1, Layout::contiguous, Layout::contiguous},   {7, 5, 3, Layout::contiguous, Layout::contiguous},
      {33, 17, 64, Layout::contiguous, Layout::contiguous}, {33, 17, 64, Layout::transposed, Layout::contiguous},
      {33, 17, 64, Layout::contiguous, Layout::transposed}, {33, 17, 64, Layout::transposed, Layout::transposed},
      {9, 6, 5, Layout::strided, Layout::strided},         {0, 4, 5, Layout::contiguous, Layout::contiguous},
      {4, 0, 5, Layout::contiguous, Layout::contiguous},   {4, 5, 0, Layout::contiguous, Layout::contiguous},
      // Rows padded, as a recurrent step's slices of a sequence; products large enough for a device to
      // split them (the CPU's pool takes column pieces), widths that do not divide evenly.
      {5, 7, 6, Layout::padded, Layout::padded, Layout::padded},
      {32, 256, 160, Layout::padded, Layout::transposed, Layout::padded},
      {24, 300, 200, Layout::transposed, Layout::padded},
      {32, 256, 160, Layout::contiguous, Layout::contiguous, Layout::padded},
      // More than one tile of 128 rows and columns (Vulkan's large register blocks).
      {150, 33, 130, Layout::transposed, Layout::contiguous},
      // A sum longer than one dispatch may walk on a device that budgets loops (a weight gradient over a
      // large batch; lavapipe cuts it into slices).
      {3, 40000, 5, Layout::transposed, Layout::contiguous}};
  auto layouts = [](const Setup& s) {  // a-b, and -c where the result is not contiguous
    std::string name = std::string(layout_name(s.a)) + "-" + layout_name(s.b);
    return s.c == Layout::contiguous ? name : name + "-" + layout_name(s.c);
  };
  auto reference = [](const std::vector<double>& a, const std::vector<double>& b, std::vector<double> c, int64_t m,
                      int64_t k, int64_t n, double alpha, double beta) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t p = 0; p < k; ++p) dot += a[i * k + p] * b[p * n + j];
        c[i * n + j] = alpha * dot + (beta == 0 ? 0 : beta * c[i * n + j]);
      }
    return c;
  };
  for (DType dtype : all_dtypes) {
    if (!is_floating(dtype)) continue;
    bool required = r.required(dtype == DType::f32, {dtype});
    for (const auto& s : setups)
      for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 0.25}})
        r.run(case_name({std::string(dtype_name(dtype)), fmt::format("{}x{}x{}", s.m, s.k, s.n),
                         layouts(s),
                         fmt::format("a{}b{}", alpha, beta)}),
              required, [&] {
                auto a = r.values(s.m * s.k, -1, 1, dtype), b = r.values(s.k * s.n, -1, 1, dtype);
                auto c = r.values(s.m * s.n, -1, 1, dtype);
                Tensor out = r.upload({s.m, s.n}, c, dtype, s.c);
                ops::gemm_(out, r.upload({s.m, s.k}, a, dtype, s.a), r.upload({s.k, s.n}, b, dtype, s.b), alpha, beta);
                r.expect_close(out, reference(a, b, c, s.m, s.k, s.n, alpha, beta),
                               tolerance_for(dtype, 4 * std::sqrt(s.k + 1.0)));
              });
    // Batched, and a rank-2 right operand broadcast over the batch with stride 0.
    for (bool broadcast : {false, true})
      r.run(case_name({std::string(dtype_name(dtype)), broadcast ? "batched-broadcast" : "batched"}), required, [&] {
        const int64_t batch = 3, m = 5, k = 4, n = 6;
        auto a = r.values(batch * m * k, -1, 1, dtype);
        auto b = r.values((broadcast ? 1 : batch) * k * n, -1, 1, dtype);
        Tensor tb = broadcast ? r.upload({k, n}, b, dtype) : r.upload({batch, k, n}, b, dtype);
        Tensor out = ops::matmul(r.upload({batch, m, k}, a, dtype), tb);
        std::vector<double> want;
        for (int64_t i = 0; i < batch; ++i) {
          std::vector<double> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
          int64_t bi = broadcast ? 0 : i;
          std::vector<double> bm(b.begin() + bi * k * n, b.begin() + (bi + 1) * k * n);
          auto ci = reference(ai, bm, std::vector<double>(m * n), m, k, n, 1, 0);
          want.insert(want.end(), ci.begin(), ci.end());
        }
        r.expect_close(out, want, tolerance_for(dtype, 4 * std::sqrt(k + 1.0)));
      });
  }
  // ABI 1.6, optional: f16/bf16 operands multiplied into an f32 result as the device accumulated it. The
  // operands hold 16-bit values exactly, so the double reference is the exact product of what was
  // multiplied and the tolerance is f32's. (A device that declines is served by ops::gemm_ through the
  // 16-bit product instead; that path is the 16-bit cases above.)
  for (DType dtype : {DType::f16, DType::bf16})
    for (const auto& s : setups)
      r.run(case_name({std::string(dtype_name(dtype)), "into-f32", fmt::format("{}x{}x{}", s.m, s.k, s.n),
                       layouts(s)}),
            false, [&] {
              auto a = r.values(s.m * s.k, -1, 1, dtype), b = r.values(s.k * s.n, -1, 1, dtype);
              auto c = r.values(s.m * s.n, -1, 1, DType::f32);
              Tensor out = r.upload({s.m, s.n}, c, DType::f32, s.c);
              kestrel_gemm_params params{};
              params.struct_size = kestrel::abi_size<kestrel_gemm_params>;
              params.alpha = 0.5;
              params.beta = 0.25;
              ops::launch(r.device(), ops::make_op(KESTREL_OP_GEMM, &params,
                                                   {r.upload({s.m, s.k}, a, dtype, s.a), r.upload({s.k, s.n}, b, dtype, s.b)},
                                                   {out}));
              r.expect_close(out, reference(a, b, c, s.m, s.k, s.n, 0.5, 0.25),
                             tolerance_for(DType::f32, 4 * std::sqrt(s.k + 1.0)));
            });
  // ABI 1.14, optional: out1, the first operand's rows summed over K (no alpha) beside the product, in the
  // result's dtype (a linear layer's bias gradient beside its weight gradient: a = dz^T, transposed): one
  // dtype throughout, and 16-bit operands into f32.
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (DType result : {dtype, DType::f32}) {
      const bool widening = result != dtype;
      if (widening && dtype != DType::f16 && dtype != DType::bf16) continue;
      // alpha 1 as a weight gradient has it (CUDA's epilogue path), and alpha 0.5 (its reduction path).
      for (const auto& s : setups)
        for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 0.25}})
        r.run(case_name({std::string(dtype_name(dtype)), widening ? "row-sums-into-f32" : "row-sums",
                         fmt::format("{}x{}x{}", s.m, s.k, s.n), layouts(s), fmt::format("a{}b{}", alpha, beta)}),
              false, [&] {
                auto a = r.values(s.m * s.k, -1, 1, dtype), b = r.values(s.k * s.n, -1, 1, dtype);
                auto c = r.values(s.m * s.n, -1, 1, dtype);
                Tensor out = r.upload({s.m, s.n}, c, result, s.c);
                Tensor sums = Tensor::full({s.m}, 77.0, result, r.device());  // (M), overwritten
                kestrel_gemm_params params{};
                params.struct_size = kestrel::abi_size<kestrel_gemm_params>;
                params.alpha = alpha;
                params.beta = beta;
                ops::launch(r.device(),
                            ops::make_op(KESTREL_OP_GEMM, &params,
                                         {r.upload({s.m, s.k}, a, dtype, s.a), r.upload({s.k, s.n}, b, dtype, s.b)},
                                         {out, sums}));
                std::vector<double> want_sums(s.m, 0.0);
                for (int64_t i = 0; i < s.m; ++i) {
                  for (int64_t p = 0; p < s.k; ++p) want_sums[i] += a[i * s.k + p];
                  want_sums[i] = round_to(result, want_sums[i]);
                }
                r.expect_close(out, reference(a, b, c, s.m, s.k, s.n, alpha, beta),
                               tolerance_for(result, 4 * std::sqrt(s.k + 1.0)), "product");
                r.expect_close(sums, want_sums, tolerance_for(result, 2 * std::sqrt(s.k + 1.0)), "row sums");
              });
    }
}

}  // namespace kestrel::conformance
