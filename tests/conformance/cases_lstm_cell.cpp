// The fused LSTM cell (plugin ABI 1.7), optional: forward (h', c' and the gates kept for backward) and
// backward (the products' and c's gradients), with rows contiguous and with strided rows (a step's slice
// of a sequence) in and out, against torch.nn.LSTM's equations in double.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Reference {
  std::vector<double> h, c, gates, dgates, dc;
};

// x, hh: (N, 4H) the two products; c, dh, dc_next: (N, H).
Reference reference(int64_t n, int64_t hidden, const std::vector<double>& x, const std::vector<double>& hh,
                    const std::vector<double>& c, const std::vector<double>& dh, const std::vector<double>& dc_next) {
  Reference r{std::vector<double>(c.size()), std::vector<double>(c.size()), std::vector<double>(x.size()),
              std::vector<double>(x.size()), std::vector<double>(c.size())};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < hidden; ++j) {
      auto pre = [&](int gate) { return x[b * 4 * hidden + gate * hidden + j] + hh[b * 4 * hidden + gate * hidden + j]; };
      const double i = sigmoid(pre(0)), f = sigmoid(pre(1)), g = std::tanh(pre(2)), o = sigmoid(pre(3));
      const int64_t at = b * hidden + j;
      r.c[at] = f * c[at] + i * g;
      r.h[at] = o * std::tanh(r.c[at]);
      const double gates[4] = {i, f, g, o};
      for (int k = 0; k < 4; ++k) r.gates[b * 4 * hidden + k * hidden + j] = gates[k];
      const double tanh_c = std::tanh(r.c[at]), total = dc_next[at] + dh[at] * o * (1 - tanh_c * tanh_c);
      const double dgates[4] = {total * g * i * (1 - i), total * c[at] * f * (1 - f), total * i * (1 - g * g),
                                dh[at] * tanh_c * o * (1 - o)};
      for (int k = 0; k < 4; ++k) r.dgates[b * 4 * hidden + k * hidden + j] = dgates[k];
      r.dc[at] = total * f;
    }
  return r;
}

}  // namespace

void lstm_cell_cases(Runner& r) {
  r.cell_cases([&](DType dtype, int64_t n, int64_t hidden, bool strided, bool backward) {
    auto x = r.values(n * 4 * hidden, -2, 2, dtype), hh = r.values(n * 4 * hidden, -2, 2, dtype);
    auto c = r.values(n * hidden, -1, 1, dtype), dh = r.values(n * hidden, -1, 1, dtype),
         dc_next = r.values(n * hidden, -1, 1, dtype);
    const Layout layout = strided ? Layout::padded : Layout::contiguous;
    const Tensor tc = r.upload({n, hidden}, c, dtype, layout);
    Tensor h_out = r.result_rows(n, hidden, dtype, strided),
           c_out = r.result_rows(n, hidden, dtype, strided),
           gates = r.result_rows(n, 4 * hidden, dtype, strided);
    ops::launch(r.device(), op_of(KESTREL_OP_LSTM_CELL, nullptr,
                                  {r.upload({n, 4 * hidden}, x, dtype, layout),
                                   r.upload({n, 4 * hidden}, hh, dtype, layout), tc},
                                  {h_out, c_out, gates}));
    const Reference want = reference(n, hidden, x, hh, c, dh, dc_next);
    const Tolerance tol = tolerance_for(dtype, 4);
    if (!backward) {
      r.expect_close(h_out, want.h, tol, "h'");
      r.expect_close(c_out, want.c, tol, "c'");
      r.expect_close(gates, want.gates, tol, "gates");
      return;
    }
    Tensor dgates = r.result_rows(n, 4 * hidden, dtype, strided),
           dc = r.result_rows(n, hidden, dtype, strided);
    ops::launch(r.device(), op_of(KESTREL_OP_LSTM_CELL_BACKWARD, nullptr,
                                  {r.upload({n, hidden}, dh, dtype, layout),
                                   r.upload({n, hidden}, dc_next, dtype, layout), gates, tc, c_out},
                                  {dgates, dc}));
    r.expect_close(dgates, want.dgates, tol, "gate gradients");
    r.expect_close(dc, want.dc, tol, "dc");
  });
}

}  // namespace kestrel::conformance
