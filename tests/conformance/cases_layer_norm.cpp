// The fused layer norm ops (plugin ABI 1.7), optional: forward (output, mean, inverse standard
// deviation) and backward (input, weight and bias gradients), without and with an affine part, against
// torch.nn.functional.layer_norm's definition in double; since ABI 1.15 also an f32 norm writing 16-bit
// rows and reading a 16-bit gradient; since 1.16 a backward adding dx to a gradient already there, which
// must give the bits of dx then a separate ADD.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

struct Reference {
  std::vector<double> y, mean, rstd, dx, dweight, dbias;
};

// x, dy: (rows, cols); weight: (cols) or empty (then 1).
Reference reference(int64_t rows, int64_t cols, double eps, const std::vector<double>& x,
                    const std::vector<double>& weight, const std::vector<double>& bias, const std::vector<double>& dy) {
  Reference r{std::vector<double>(x.size()), std::vector<double>(size_t(rows)), std::vector<double>(size_t(rows)),
              std::vector<double>(x.size()), std::vector<double>(size_t(cols)), std::vector<double>(size_t(cols))};
  std::vector<double> xhat(static_cast<size_t>(cols)), g(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x[i * cols + j] / double(cols);
    for (int64_t j = 0; j < cols; ++j) var += (x[i * cols + j] - mean) * (x[i * cols + j] - mean) / double(cols);
    const double rstd = 1 / std::sqrt(var + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      xhat[j] = (x[i * cols + j] - mean) * rstd;
      const double w = weight.empty() ? 1.0 : weight[j];
      r.y[i * cols + j] = xhat[j] * w + (bias.empty() ? 0.0 : bias[j]);
      g[j] = dy[i * cols + j] * w;
      mean_g += g[j] / double(cols);
      mean_gx += g[j] * xhat[j] / double(cols);
      r.dweight[j] += dy[i * cols + j] * xhat[j];
      r.dbias[j] += dy[i * cols + j];
    }
    for (int64_t j = 0; j < cols; ++j) r.dx[i * cols + j] = rstd * (g[j] - mean_g - xhat[j] * mean_gx);
    r.mean[i] = mean;
    r.rstd[i] = rstd;
  }
  return r;
}

// One case: x, the parameters and dx in `dtype`, y (forward) or dy (backward) in `rows` (dtype's own, or
// since ABI 1.15 f16/bf16 beside an f32 x). `adds`: backward again, adding dx to a gradient (ABI 1.16).
void one_case(Runner& r, DType dtype, DType rows_dtype, const Shape& shape, int affine, bool backward, bool adds) {
  const int64_t rows = shape[0], cols = shape[1];
  auto x = r.values(rows * cols, -2, 2, dtype), dy = r.values(rows * cols, -1, 1, rows_dtype);
  auto weight = affine ? r.values(cols, 0.5, 1.5, dtype) : std::vector<double>();
  auto bias = affine == 2 ? r.values(cols, -1, 1, dtype) : std::vector<double>();
  const kestrel_layer_norm_params p{abi_size<kestrel_layer_norm_params>, 1e-5};
  const Tensor tx = r.upload(shape, x, dtype);
  std::vector<Tensor> inputs{tx};
  if (affine) inputs.push_back(r.upload({cols}, weight, dtype));
  if (affine == 2) inputs.push_back(r.upload({cols}, bias, dtype));
  Tensor y = Tensor::empty(shape, rows_dtype, r.device()), mean = Tensor::empty({rows}, statistics_of(dtype), r.device()),
         rstd = Tensor::empty({rows}, statistics_of(dtype), r.device());
  ops::launch(r.device(), op_of(KESTREL_OP_LAYER_NORM, &p, inputs, {y, mean, rstd}));
  const Reference want = reference(rows, cols, p.eps, x, weight, bias, dy);
  const Tolerance tol = tolerance_for(dtype, 8);
  if (!backward) {
    r.expect_close(y, want.y, rows_dtype == dtype ? tol : tolerance_for(rows_dtype), "output");
    r.expect_close(mean, want.mean, tolerance_for(statistics_of(dtype), 4), "mean");
    r.expect_close(rstd, want.rstd, tolerance_for(statistics_of(dtype), 4), "rstd");
    return;
  }
  std::vector<Tensor> grad_inputs{r.upload(shape, dy, rows_dtype), tx, mean, rstd};
  if (affine) grad_inputs.push_back(inputs[1]);
  std::vector<Tensor> grads{Tensor::empty(shape, dtype, r.device())};
  for (int i = 0; i < affine; ++i) grads.push_back(Tensor::empty({cols}, dtype, r.device()));
  ops::launch(r.device(), op_of(KESTREL_OP_LAYER_NORM_BACKWARD, &p, grad_inputs, grads));
  r.expect_close(grads[0], want.dx, tol, "dx");
  // The column sums run over every row: their error grows with the row count.
  const Tolerance sums = tolerance_for(dtype, 8 * std::sqrt(double(rows)));
  if (affine) r.expect_close(grads[1], want.dweight, sums, "dweight");
  if (affine == 2) r.expect_close(grads[2], want.dbias, sums, "dbias");
  if (!adds) return;
  // dx rounded to dtype, plus the gradient there, rounded once more: exactly the sum of the plain op's dx
  // and it. The double sum rounded to the dtype is that sum's correctly rounded value: rounding twice
  // (to double, then to f32; to f32, then to 16 bits, as round_to and the 16-bit kernels do) is harmless
  // where the wider format has at least 2p + 1 bits of the narrower's p.
  const std::vector<double> so_far = r.values(rows * cols, -1, 1, dtype), plain = grads[0].to_doubles();
  std::vector<double> sum(plain.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = round_to(dtype, plain[i] + so_far[i]);
  // The gradient as the engine hands it: rows of a larger buffer (an offset), here the one dy is in too.
  std::vector<double> both = dy;
  const bool shares_dy = rows_dtype == dtype;
  if (!shares_dy) both.assign(dy.size(), 0.0);
  both.insert(both.end(), so_far.begin(), so_far.end());
  const Tensor buffer = r.upload({2 * rows, cols}, both, dtype), added = buffer.slice(0, rows, 2 * rows);
  if (shares_dy) grad_inputs[0] = buffer.slice(0, 0, rows);
  grad_inputs.push_back(added);
  std::vector<Tensor> summed{Tensor::empty(shape, dtype, r.device())};
  for (int i = 0; i < affine; ++i) summed.push_back(Tensor::empty({cols}, dtype, r.device()));
  ops::launch(r.device(), op_of(KESTREL_OP_LAYER_NORM_BACKWARD, &p, grad_inputs, summed));
  r.expect_close(summed[0], sum, Tolerance{0, 0}, "dx + added");
  r.expect_close(added, so_far, Tolerance{0, 0}, "the added gradient, unchanged");
  for (int i = 1; i <= affine; ++i)
    r.expect_close(summed[size_t(i)], grads[size_t(i)].to_doubles(), Tolerance{0, 0}, "dweight, dbias as without");
}

}  // namespace

void layer_norm_cases(Runner& r) {
  // A row shorter than a warp; rows a GPU's warp holds at 8, 16, 24 (GPT-2's 768) and 32 elements a lane,
  // and one just wider that takes a block per row; enough rows for the weight gradient's sums to be split
  // over row ranges; no rows (zero weight and bias gradients).
  const Shape shapes[] = {{4, 7}, {5, 256}, {3, 300}, {9, 768}, {3, 1024}, {2, 1025}, {257, 33}, {0, 5}};
  // Every float dtype alone, and f32 with 16-bit rows (ABI 1.15: a pre-norm block's norm under autocast).
  const std::pair<DType, DType> dtypes[] = {{DType::f32, DType::f32},  {DType::f64, DType::f64},
                                            {DType::f16, DType::f16},  {DType::bf16, DType::bf16},
                                            {DType::f32, DType::bf16}, {DType::f32, DType::f16}};
  for (auto [dtype, rows_dtype] : dtypes)
    for (const Shape& shape : shapes)
      for (int affine : {0, 1, 2})  // none, weight, weight and bias
        for (int pass : {0, 1, 2}) {  // forward, backward, backward adding to a gradient (ABI 1.16)
          const std::string dtypes_name = rows_dtype == dtype ? std::string(dtype_name(dtype))
                                                              : fmt::format("{} rows {}", dtype_name(dtype), dtype_name(rows_dtype));
          r.run(case_name({pass == 0 ? "forward" : pass == 1 ? "backward" : "backward+add", dtypes_name, shape_str(shape),
                           affine == 0 ? "plain" : affine == 1 ? "weight" : "weight+bias"}),
                false, [&] { one_case(r, dtype, rows_dtype, shape, affine, pass > 0, pass == 2); });
        }
}

}  // namespace kestrel::conformance
