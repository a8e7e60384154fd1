// fill, copy/cast, unary and binary cases.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

const double nan_value = std::numeric_limits<double>::quiet_NaN();
const double inf_value = std::numeric_limits<double>::infinity();

struct ShapeLayout {
  Shape shape;
  Layout layout;
};

const std::vector<ShapeLayout>& elementwise_shapes() {
  static const std::vector<ShapeLayout> shapes = {
      {{7, 13}, Layout::contiguous}, {{7, 13}, Layout::strided}, {{5, 4}, Layout::transposed},
      {{0, 3}, Layout::contiguous},  {{}, Layout::contiguous},    {{1000}, Layout::contiguous},
      // large enough for a backend to split over threads or workgroups (the CPU plugin's pool)
      {{600, 501}, Layout::contiguous}, {{300, 1001}, Layout::strided}};
  return shapes;
}

std::string dtype_str(DType d) { return std::string(dtype_name(d)); }

double unary_reference(kestrel_unary_fn fn, double x, double alpha, double beta) {
  switch (fn) {
    case KESTREL_UNARY_NEG: return -x;
    case KESTREL_UNARY_ABS: return std::fabs(x);
    case KESTREL_UNARY_EXP: return std::exp(x);
    case KESTREL_UNARY_LOG: return std::log(x);
    case KESTREL_UNARY_SQRT: return std::sqrt(x);
    case KESTREL_UNARY_RSQRT: return 1.0 / std::sqrt(x);
    case KESTREL_UNARY_TANH: return std::tanh(x);
    case KESTREL_UNARY_SIGMOID: return 1.0 / (1.0 + std::exp(-x));
    case KESTREL_UNARY_RELU: return std::isnan(x) ? x : (x < 0 ? 0.0 : x);
    case KESTREL_UNARY_GELU: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case KESTREL_UNARY_GELU_GRAD:
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    case KESTREL_UNARY_STEP: return x > 0 ? 1.0 : 0.0;
    case KESTREL_UNARY_SQUARE: return x * x;
    case KESTREL_UNARY_RECIPROCAL: return 1.0 / x;
    case KESTREL_UNARY_SIGN: return std::isnan(x) ? x : double((x > 0) - (x < 0));
    case KESTREL_UNARY_AFFINE: return alpha * x + beta;
    case KESTREL_UNARY_POW: return std::pow(x, alpha);
  }
  return nan_value;
}

// Input ranges that keep each function in its domain and away from overflow.
std::pair<double, double> unary_range(kestrel_unary_fn fn, DType dtype) {
  if (dtype == DType::u8) return {0, 40};
  if (!is_floating(dtype)) return {-20, 20};
  switch (fn) {
    case KESTREL_UNARY_LOG: case KESTREL_UNARY_SQRT: case KESTREL_UNARY_RSQRT: case KESTREL_UNARY_POW:
      return {0.1, 4};
    case KESTREL_UNARY_RECIPROCAL: return {0.5, 3};
    default: return {-3, 3};
  }
}

bool integer_unary(kestrel_unary_fn fn) {
  return fn == KESTREL_UNARY_NEG || fn == KESTREL_UNARY_ABS || fn == KESTREL_UNARY_RELU || fn == KESTREL_UNARY_STEP ||
         fn == KESTREL_UNARY_SQUARE || fn == KESTREL_UNARY_SIGN;
}

double binary_reference(kestrel_binary_fn fn, double a, double b) {
  switch (fn) {
    case KESTREL_BINARY_ADD: return a + b;
    case KESTREL_BINARY_SUB: return a - b;
    case KESTREL_BINARY_MUL: return a * b;
    case KESTREL_BINARY_DIV: return a / b;
    case KESTREL_BINARY_MAX: return std::isnan(a) || std::isnan(b) ? nan_value : std::max(a, b);
    case KESTREL_BINARY_MIN: return std::isnan(a) || std::isnan(b) ? nan_value : std::min(a, b);
    case KESTREL_BINARY_POW: return std::pow(a, b);
    case KESTREL_BINARY_EQ: return a == b;
    case KESTREL_BINARY_NE: return a != b;
    case KESTREL_BINARY_LT: return a < b;
    case KESTREL_BINARY_LE: return a <= b;
    case KESTREL_BINARY_GT: return a > b;
    case KESTREL_BINARY_GE: return a >= b;
    case KESTREL_BINARY_RELU_BACKWARD: return a * (b > 0 ? 1.0 : 0.0);
    case KESTREL_BINARY_GELU_BACKWARD: return a * unary_reference(KESTREL_UNARY_GELU_GRAD, b, 0, 0);
  }
  return nan_value;
}

// Maps an output index to the linear index of a broadcast operand of shape `in`.
int64_t broadcast_source(const std::vector<int64_t>& out_index, const Shape& in) {
  std::vector<int64_t> index(in.size());
  size_t lead = out_index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) index[d] = in[d] == 1 ? 0 : out_index[lead + d];
  return ravel(index, in);
}

}  // namespace

void fill_cases(Runner& r) {
  for (DType dtype : all_dtypes)
    for (const auto& [shape, layout] : elementwise_shapes())
      for (double value : {0.0, 3.0, -2.5}) {
        if (value < 0 && dtype == DType::u8) continue;
        r.run(case_name({dtype_str(dtype), shape_str(shape), fmt::format("{}", value)}),
              r.required(dtype == DType::f32, {dtype}), [&] {
          Tensor t = Tensor::empty(shape, dtype, r.device());
          ops::fill_(t, value);
          r.expect_close(t, std::vector<double>(t.numel(), round_to(dtype, value)), tolerance_for(dtype));
        });
      }
}

void copy_cases(Runner& r) {
  const std::vector<ShapeLayout> layouts = {{{6, 7}, Layout::contiguous},
                                            {{6, 7}, Layout::strided},
                                            {{6, 7}, Layout::transposed},
                                            {{2, 3, 5}, Layout::transposed},
                                            {{600, 501}, Layout::transposed},
                                            {{600, 501}, Layout::contiguous},
                                            {{0, 5}, Layout::contiguous}};
  for (DType from : all_dtypes)
    for (DType to : all_dtypes)
      for (const auto& [shape, layout] : layouts) {
        bool required = r.required(from == DType::f32 || to == DType::f32, {from, to});
        r.run(case_name({dtype_str(from) + "->" + dtype_str(to), shape_str(shape), layout_name(layout)}), required, [&] {
          auto values = r.values(shape_numel(shape), 0, 100, from);
          Tensor in = r.upload(shape, values, from, layout);
          Tensor out = Tensor::empty(shape, to, r.device());
          ops::copy_(out, in);
          std::vector<double> want;
          for (double v : values) want.push_back(round_to(to, v));
          r.expect_close(out, want, tolerance_for(to));
        });
      }
  // Contiguous views one element into their buffers: a backend that moves whole aligned blocks of
  // elements must notice the misalignment (and the odd length's tail).
  for (DType from : {DType::f32, DType::bf16, DType::u8})
    for (DType to : {DType::f32, DType::bf16, DType::f64})
      r.run(case_name({dtype_str(from) + "->" + dtype_str(to), "(1001)", "one element in"}),
            r.required(from == DType::f32 && to == DType::f32, {from, to}), [&] {
              auto values = r.values(1002, 0, 100, from);
              Tensor in = r.upload({1002}, values, from).slice(0, 1, 1002);
              Tensor out_buffer = Tensor::zeros({1002}, to, r.device());
              Tensor out = out_buffer.slice(0, 1, 1002);
              ops::copy_(out, in);
              std::vector<double> want{0};  // the element before the view stays as it was
              for (size_t i = 1; i < values.size(); ++i) want.push_back(round_to(to, values[i]));
              r.expect_close(out_buffer, want, tolerance_for(to));
            });
}

void unary_cases(Runner& r) {
  for (int f = KESTREL_UNARY_NEG; f <= KESTREL_UNARY_POW; ++f) {
    auto fn = static_cast<kestrel_unary_fn>(f);
    const double alpha = fn == KESTREL_UNARY_POW ? 2.5 : 0.75, beta = -0.5;
    for (DType dtype : all_dtypes) {
      bool required = r.required(dtype == DType::f32 || (dtype == DType::i64 && integer_unary(fn)), {dtype});
      for (const auto& [shape, layout] : elementwise_shapes())
        r.run(case_name({unary_fn_name(fn), dtype_str(dtype), shape_str(shape), layout_name(layout)}), required, [&] {
          auto [lo, hi] = unary_range(fn, dtype);
          auto values = r.values(shape_numel(shape), lo, hi, dtype);
          Tensor x = r.upload(shape, values, dtype, layout);
          Tensor y = ops::unary(fn, x, alpha, beta);
          std::vector<double> want;
          for (double v : values) want.push_back(round_to(dtype, unary_reference(fn, v, alpha, beta)));
          r.expect_close(y, want, tolerance_for(dtype, 2));
        });
      if (!is_floating(dtype)) continue;
      // IEEE specials must propagate as they do in double arithmetic.
      r.run(case_name({unary_fn_name(fn), dtype_str(dtype), "nan-inf"}), r.required(dtype == DType::f32, {dtype}), [&] {
        std::vector<double> values = {nan_value, inf_value, -inf_value, 0.0, 1.0, -1.0};
        Tensor y = ops::unary(fn, r.upload({6}, values, dtype), alpha, beta);
        std::vector<double> want;
        for (double v : values) want.push_back(round_to(dtype, unary_reference(fn, v, alpha, beta)));
        r.expect_close(y, want, tolerance_for(dtype, 2));
      });
    }
  }
  // The trainer's finiteness test (MetricsWindow): x * 0 == 0 exactly when x is finite. A compiler
  // that folds x * 0 to 0 (as relaxed floating-point modes may) would hide a diverged loss's step.
  r.run(case_name({"finite-test", "f32", "nan-inf"}), true, [&] {
    std::vector<double> values = {nan_value, inf_value, -inf_value, 0.0, 3e38, -1.0};
    Tensor zero = r.upload({}, {0.0}, DType::f32);
    Tensor zeros = ops::binary(KESTREL_BINARY_MUL, r.upload({6}, values, DType::f32), zero);
    Tensor finite = ops::binary(KESTREL_BINARY_EQ, zeros, zero);
    r.expect_close(finite, {0, 0, 0, 1, 1, 1}, Tolerance{0, 0});
  });
}

void binary_cases(Runner& r) {
  struct Pair {
    Shape a, b;
    Layout layout_a;
  };
  const std::vector<Pair> pairs = {{{4, 5}, {4, 5}, Layout::contiguous}, {{4, 5}, {4, 5}, Layout::strided},
                                   {{6, 3}, {6, 3}, Layout::transposed}, {{4, 1}, {1, 5}, Layout::contiguous},
                                   {{3, 1, 6}, {6}, Layout::contiguous}, {{}, {2, 3}, Layout::contiguous},
                                   {{0, 3}, {1, 3}, Layout::contiguous},   {{600, 501}, {600, 501}, Layout::contiguous},
                                   {{600, 501}, {501}, Layout::strided}};
  for (int f = KESTREL_BINARY_ADD; f <= KESTREL_BINARY_GELU_BACKWARD; ++f) {
    auto fn = static_cast<kestrel_binary_fn>(f);
    // The activation gradients (ABI 1.14) are optional: the engine composes them where a plugin lacks them.
    const bool activation_grad = fn >= KESTREL_BINARY_RELU_BACKWARD;
    bool float_only = fn == KESTREL_BINARY_DIV || fn == KESTREL_BINARY_POW || activation_grad;
    for (DType dtype : all_dtypes) {
      bool required = !activation_grad && r.required(dtype == DType::f32 || (dtype == DType::i64 && !float_only), {dtype});
      for (const auto& [shape_a, shape_b, layout] : pairs)
        r.run(case_name({binary_fn_name(fn), dtype_str(dtype), shape_str(shape_a) + "x" + shape_str(shape_b),
                         layout_name(layout)}),
              required, [&] {
                double lo = dtype == DType::u8 ? 0 : -10, hi = dtype == DType::u8 ? 12 : 10;
                auto a = fn == KESTREL_BINARY_POW ? r.values(shape_numel(shape_a), 0.1, 3, dtype)
                                                  : r.values(shape_numel(shape_a), lo, hi, dtype);
                auto b = fn == KESTREL_BINARY_DIV   ? r.values(shape_numel(shape_b), 0.5, 3, dtype)
                         : fn == KESTREL_BINARY_POW ? r.values(shape_numel(shape_b), -2, 2, dtype)
                                                    : r.values(shape_numel(shape_b), lo, hi, dtype);
                if (shape_a == shape_b && !a.empty()) b[0] = a[0];  // so equality comparisons see a tie
                Tensor out = ops::binary(fn, r.upload(shape_a, a, dtype, layout), r.upload(shape_b, b, dtype));
                Shape shape = ops::broadcast_shapes(shape_a, shape_b);
                std::vector<double> want(shape_numel(shape));
                for (int64_t i = 0; i < shape_numel(shape); ++i) {
                  auto index = unravel(i, shape);
                  want[i] = round_to(dtype, binary_reference(fn, a[broadcast_source(index, shape_a)],
                                                             b[broadcast_source(index, shape_b)]));
                }
                r.expect_close(out, want, tolerance_for(dtype, 2));
              });
      // In place, the result over its first operand (out = a, as a gradient accumulates).
      r.run(case_name({binary_fn_name(fn), dtype_str(dtype), "(600,501)", "in place"}), required, [&] {
        const double lo = fn == KESTREL_BINARY_POW || dtype == DType::u8 ? 0.5 : -10, hi = dtype == DType::u8 ? 12 : 3;
        auto a = r.values(600 * 501, lo, hi, dtype), b = r.values(600 * 501, 0.5, 2, dtype);
        Tensor out = r.upload({600, 501}, a, dtype);
        ops::binary_(fn, out, out, r.upload({600, 501}, b, dtype));
        std::vector<double> want;
        for (size_t i = 0; i < a.size(); ++i) want.push_back(round_to(dtype, binary_reference(fn, a[i], b[i])));
        r.expect_close(out, want, tolerance_for(dtype, 2));
      });
      if (!is_floating(dtype)) continue;
      r.run(case_name({binary_fn_name(fn), dtype_str(dtype), "nan-inf"}), r.required(dtype == DType::f32, {dtype}), [&] {
        std::vector<double> a = {nan_value, 1.0, inf_value, -inf_value, 2.0, nan_value};
        std::vector<double> b = {1.0, nan_value, 1.0, 2.0, inf_value, nan_value};
        Tensor out = ops::binary(fn, r.upload({6}, a, dtype), r.upload({6}, b, dtype));
        std::vector<double> want;
        for (size_t i = 0; i < a.size(); ++i) want.push_back(round_to(dtype, binary_reference(fn, a[i], b[i])));
        r.expect_close(out, want, tolerance_for(dtype, 2));
      });
    }
  }
  // ABI 1.15, optional: ADD of an f32 and a 16-bit operand (a residual stream and a mixed-precision block's
  // output), the f32 result correctly rounded: contiguous (the packed kernels, and a tail), with a
  // strided or padded f32 operand, a transposed 16-bit one, in place over the f32 operand, NaN and infinities.
  for (DType narrow : {DType::bf16, DType::f16})
    for (Layout layout_a : {Layout::contiguous, Layout::strided, Layout::padded})
      for (Layout layout_b : {Layout::contiguous, Layout::transposed})
        for (bool in_place : {false, true}) {
          if (in_place && layout_a != Layout::contiguous) continue;
          r.run(case_name({"add", "f32+" + std::string(dtype_str(narrow)), "(601,501)", layout_name(layout_a),
                           layout_name(layout_b), in_place ? "in place" : "new"}),
                false, [&] {
                  // 601 * 501 elements: a tail past the last whole pack of four.
                  auto a = r.values(601 * 501, -10, 10, DType::f32), b = r.values(601 * 501, -10, 10, narrow);
                  a[0] = nan_value, a[1] = inf_value, b[2] = -inf_value, b[3] = nan_value;
                  const Tensor ta = r.upload({601, 501}, a, DType::f32, layout_a), tb = r.upload({601, 501}, b, narrow, layout_b);
                  Tensor out = in_place ? ta : Tensor::empty({601, 501}, DType::f32, r.device());
                  const kestrel_binary_params p{abi_size<kestrel_binary_params>, KESTREL_BINARY_ADD};
                  ops::launch(r.device(), op_of(KESTREL_OP_BINARY, &p, {ta, tb}, {out}));
                  std::vector<double> want;
                  for (size_t i = 0; i < a.size(); ++i) want.push_back(round_to(DType::f32, a[i] + b[i]));
                  r.expect_close(out, want, Tolerance{0, 0});  // one correctly rounded f32 addition
                });
        }
}

}  // namespace kestrel::conformance
