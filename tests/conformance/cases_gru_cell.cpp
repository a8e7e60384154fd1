// The fused GRU cell (plugin ABI 1.9), optional: forward (h' and the gates kept for backward) and backward
// (both products' gradients and h's direct one), with rows contiguous and with strided rows (a step's
// slice of a sequence) in and out, against torch.nn.GRU's equations in double.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Reference {
  std::vector<double> h_next, gates, dx, drec, dh;
};

// x, hh: (N, 3H) the two products (gates r, z, n); h, dh_next: (N, H). torch.nn.GRU:
// r = sigmoid(x_r + hh_r), z = sigmoid(x_z + hh_z), n = tanh(x_n + r * hh_n), h' = (1 - z) n + z h.
Reference reference(int64_t n, int64_t hidden, const std::vector<double>& x, const std::vector<double>& hh,
                    const std::vector<double>& h, const std::vector<double>& dh_next) {
  Reference r{std::vector<double>(h.size()), std::vector<double>(x.size()), std::vector<double>(x.size()),
              std::vector<double>(x.size()), std::vector<double>(h.size())};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < hidden; ++j) {
      auto at = [&](int gate) { return size_t(b * 3 * hidden + gate * hidden + j); };
      const double reset = sigmoid(x[at(0)] + hh[at(0)]), update = sigmoid(x[at(1)] + hh[at(1)]);
      const double candidate = std::tanh(x[at(2)] + reset * hh[at(2)]);
      const size_t row = size_t(b * hidden + j);
      r.h_next[row] = (1 - update) * candidate + update * h[row];
      r.gates[at(0)] = reset, r.gates[at(1)] = update, r.gates[at(2)] = candidate;
      // d/d(pre-activations) of h' by the chain rule, with dh' given.
      const double g = dh_next[row];
      const double dn = g * (1 - update) * (1 - candidate * candidate);
      const double dr = dn * hh[at(2)] * reset * (1 - reset);
      const double dz = g * (h[row] - candidate) * update * (1 - update);
      r.dx[at(0)] = r.drec[at(0)] = dr;
      r.dx[at(1)] = r.drec[at(1)] = dz;
      r.dx[at(2)] = dn;
      r.drec[at(2)] = dn * reset;
      r.dh[row] = g * update;
    }
  return r;
}

}  // namespace

void gru_cell_cases(Runner& r) {
  r.cell_cases([&](DType dtype, int64_t n, int64_t hidden, bool strided, bool backward) {
    auto x = r.values(n * 3 * hidden, -2, 2, dtype), hh = r.values(n * 3 * hidden, -2, 2, dtype);
    auto h = r.values(n * hidden, -1, 1, dtype), dh_next = r.values(n * hidden, -1, 1, dtype);
    const Layout layout = strided ? Layout::padded : Layout::contiguous;
    const Tensor th = r.upload({n, hidden}, h, dtype, layout),
                 thh = r.upload({n, 3 * hidden}, hh, dtype, layout);
    Tensor h_out = r.result_rows(n, hidden, dtype, strided),
           gates = r.result_rows(n, 3 * hidden, dtype, strided);
    ops::launch(r.device(), op_of(KESTREL_OP_GRU_CELL, nullptr,
                                  {r.upload({n, 3 * hidden}, x, dtype, layout), thh, th}, {h_out, gates}));
    const Reference want = reference(n, hidden, x, hh, h, dh_next);
    const Tolerance tol = tolerance_for(dtype, 4);
    if (!backward) {
      r.expect_close(h_out, want.h_next, tol, "h'");
      r.expect_close(gates, want.gates, tol, "gates");
      return;
    }
    Tensor dx = r.result_rows(n, 3 * hidden, dtype, strided),
           drec = r.result_rows(n, 3 * hidden, dtype, strided), dh = r.result_rows(n, hidden, dtype, strided);
    ops::launch(r.device(), op_of(KESTREL_OP_GRU_CELL_BACKWARD, nullptr,
                                  {r.upload({n, hidden}, dh_next, dtype, layout), gates, thh, th},
                                  {dx, drec, dh}));
    r.expect_close(dx, want.dx, tol, "input product's gradient");
    r.expect_close(drec, want.drec, tol, "state product's gradient");
    r.expect_close(dh, want.dh, tol, "dh");
  });
}

}  // namespace kestrel::conformance
