// Whole recurrent layers (plugin ABI 1.15), optional: forward for inference (no saved output) and for
// training (with the saved bytes op_saved_bytes asks for), and backward from what training forward saved,
// for every cell (RNN tanh and ReLU, LSTM, GRU), against torch.nn's equations stepped through in double
// from a non-zero initial state.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"
#include "kestrel/error.h"
#include "kestrel/plugin_struct_size.hpp"

namespace kestrel::conformance {

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Sizes {
  int64_t n, t, f, h;
};

// The layer's tensors as host values, row-major: x (N,T,F), w_ih (G*H,F), w_hh (G*H,H), b_ih, b_hh (G*H),
// h0, c0 (N,H), dy (N,T,H).
struct Layer {
  std::vector<double> x, w_ih, w_hh, b_ih, b_hh, h0, c0, dy;
};

struct Reference {
  std::vector<double> y, h_last, c_last, dx, dw_ih, dw_hh, db_ih, db_hh;
};

// Forward through every step, keeping what backward needs, then backward through time.
Reference reference(kestrel_recurrent_cell cell, const Sizes& s, const Layer& l) {
  const int64_t g = kestrel::plugin_shapes::recurrent_gates(cell), gh = g * s.h;
  Reference r;
  r.y.assign(size_t(s.n * s.t * s.h), 0);
  r.dx.assign(l.x.size(), 0);
  r.dw_ih.assign(l.w_ih.size(), 0), r.dw_hh.assign(l.w_hh.size(), 0);
  r.db_ih.assign(size_t(gh), 0), r.db_hh.assign(size_t(gh), 0);
  r.h_last.resize(size_t(s.n * s.h)), r.c_last.resize(size_t(s.n * s.h));
  for (int64_t b = 0; b < s.n; ++b) {
    // Per step: the state before it, the two products (biases in), the activated gates and the cell.
    std::vector<std::vector<double>> h_prev(size_t(s.t)), c_prev(size_t(s.t)), ax(size_t(s.t)), ah(size_t(s.t)),
        act(size_t(s.t)), c_next(size_t(s.t));
    std::vector<double> h(l.h0.begin() + b * s.h, l.h0.begin() + (b + 1) * s.h);
    std::vector<double> c(l.c0.begin() + b * s.h, l.c0.begin() + (b + 1) * s.h);
    auto x_at = [&](int64_t t, int64_t k) { return l.x[size_t((b * s.t + t) * s.f + k)]; };
    for (int64_t t = 0; t < s.t; ++t) {
      h_prev[t] = h, c_prev[t] = c;
      ax[t].assign(size_t(gh), 0), ah[t].assign(size_t(gh), 0), act[t].assign(size_t(gh), 0);
      for (int64_t row = 0; row < gh; ++row) {
        double sx = l.b_ih[row], sh = l.b_hh[row];
        for (int64_t k = 0; k < s.f; ++k) sx += l.w_ih[size_t(row * s.f + k)] * x_at(t, k);
        for (int64_t k = 0; k < s.h; ++k) sh += l.w_hh[size_t(row * s.h + k)] * h_prev[t][k];
        ax[t][row] = sx, ah[t][row] = sh;
      }
      for (int64_t j = 0; j < s.h; ++j) {
        auto pre = [&](int gate) { return ax[t][gate * s.h + j] + ah[t][gate * s.h + j]; };
        auto keep = [&](int gate, double v) { return act[t][gate * s.h + j] = v; };
        switch (cell) {
          case KESTREL_RECURRENT_RNN_TANH: h[j] = keep(0, std::tanh(pre(0))); break;
          case KESTREL_RECURRENT_RNN_RELU: h[j] = keep(0, std::max(pre(0), 0.0)); break;
          case KESTREL_RECURRENT_LSTM: {
            const double i = keep(0, sigmoid(pre(0))), f = keep(1, sigmoid(pre(1))), gg = keep(2, std::tanh(pre(2))),
                         o = keep(3, sigmoid(pre(3)));
            c[j] = f * c_prev[t][j] + i * gg;
            h[j] = o * std::tanh(c[j]);
            break;
          }
          case KESTREL_RECURRENT_GRU: {
            const double reset = keep(0, sigmoid(pre(0))), update = keep(1, sigmoid(pre(1)));
            const double candidate = keep(2, std::tanh(ax[t][2 * s.h + j] + reset * ah[t][2 * s.h + j]));
            h[j] = (1 - update) * candidate + update * h_prev[t][j];
            break;
          }
        }
        r.y[size_t((b * s.t + t) * s.h + j)] = h[j];
      }
      c_next[t] = c;
    }
    std::copy(h.begin(), h.end(), r.h_last.begin() + b * s.h);
    std::copy(c.begin(), c.end(), r.c_last.begin() + b * s.h);

    std::vector<double> dh(size_t(s.h), 0), dc(size_t(s.h), 0);  // from the later steps
    for (int64_t t = s.t - 1; t >= 0; --t) {
      std::vector<double> dax(static_cast<size_t>(gh)), dah(static_cast<size_t>(gh)), dh_prev(size_t(s.h), 0),
          dc_prev(size_t(s.h), 0);
      for (int64_t j = 0; j < s.h; ++j) {
        const double grad = dh[j] + l.dy[size_t((b * s.t + t) * s.h + j)];
        auto a = [&](int gate) { return act[t][gate * s.h + j]; };
        auto both = [&](int gate, double v) { dax[gate * s.h + j] = dah[gate * s.h + j] = v; };
        switch (cell) {
          case KESTREL_RECURRENT_RNN_TANH: both(0, grad * (1 - a(0) * a(0))); break;
          case KESTREL_RECURRENT_RNN_RELU: both(0, a(0) > 0 ? grad : 0); break;
          case KESTREL_RECURRENT_LSTM: {
            const double tc = std::tanh(c_next[t][j]);
            const double total = dc[j] + grad * a(3) * (1 - tc * tc);
            both(0, total * a(2) * a(0) * (1 - a(0)));
            both(1, total * c_prev[t][j] * a(1) * (1 - a(1)));
            both(2, total * a(0) * (1 - a(2) * a(2)));
            both(3, grad * tc * a(3) * (1 - a(3)));
            dc_prev[j] = total * a(1);
            break;
          }
          case KESTREL_RECURRENT_GRU: {
            const double reset = a(0), update = a(1), candidate = a(2);
            const double dn = grad * (1 - update) * (1 - candidate * candidate);
            both(0, dn * ah[t][2 * s.h + j] * reset * (1 - reset));
            both(1, grad * (h_prev[t][j] - candidate) * update * (1 - update));
            dax[2 * s.h + j] = dn;
            dah[2 * s.h + j] = dn * reset;
            dh_prev[j] = grad * update;
            break;
          }
        }
      }
      for (int64_t row = 0; row < gh; ++row) {
        r.db_ih[row] += dax[row], r.db_hh[row] += dah[row];
        for (int64_t k = 0; k < s.f; ++k) {
          r.dw_ih[size_t(row * s.f + k)] += dax[row] * x_at(t, k);
          r.dx[size_t((b * s.t + t) * s.f + k)] += l.w_ih[size_t(row * s.f + k)] * dax[row];
        }
        for (int64_t k = 0; k < s.h; ++k) {
          r.dw_hh[size_t(row * s.h + k)] += dah[row] * h_prev[t][k];
          dh_prev[k] += l.w_hh[size_t(row * s.h + k)] * dah[row];
        }
      }
      dh = dh_prev, dc = dc_prev;
    }
  }
  return r;
}

const char* cell_name(kestrel_recurrent_cell cell) {
  switch (cell) {
    case KESTREL_RECURRENT_RNN_TANH: return "rnn_tanh";
    case KESTREL_RECURRENT_RNN_RELU: return "rnn_relu";
    case KESTREL_RECURRENT_LSTM: return "lstm";
    case KESTREL_RECURRENT_GRU: return "gru";
  }
  return "?";
}

enum class Mode { inference, training, backward };

void one_case(Runner& r, kestrel_recurrent_cell cell, DType dtype, const Sizes& s, Mode mode) {
  const int64_t gh = kestrel::plugin_shapes::recurrent_gates(cell) * s.h;
  const bool lstm = cell == KESTREL_RECURRENT_LSTM;
  const double bound = 1 / std::sqrt(double(s.h));  // torch's initialisation range
  Layer l{r.values(s.n * s.t * s.f, -1, 1, dtype), r.values(gh * s.f, -bound, bound, dtype),
          r.values(gh * s.h, -bound, bound, dtype), r.values(gh, -bound, bound, dtype),
          r.values(gh, -bound, bound, dtype), r.values(s.n * s.h, -0.5, 0.5, dtype),
          r.values(s.n * s.h, -0.5, 0.5, dtype), r.values(s.n * s.t * s.h, -1, 1, dtype)};
  const Tensor x = r.upload({s.n, s.t, s.f}, l.x, dtype), w_ih = r.upload({gh, s.f}, l.w_ih, dtype),
               w_hh = r.upload({gh, s.h}, l.w_hh, dtype), b_ih = r.upload({gh}, l.b_ih, dtype),
               b_hh = r.upload({gh}, l.b_hh, dtype), h0 = r.upload({s.n, s.h}, l.h0, dtype),
               c0 = r.upload({s.n, s.h}, l.c0, dtype);
  const Device& device = r.device();
  Tensor y = Tensor::empty({s.n, s.t, s.h}, dtype, device), h_last = Tensor::empty({s.n, s.h}, dtype, device),
         c_last = Tensor::empty({s.n, s.h}, dtype, device);
  std::vector<Tensor> inputs{x, w_ih, w_hh, b_ih, b_hh, h0}, outputs{y, h_last};
  if (lstm) inputs.push_back(c0), outputs.push_back(c_last);
  auto params = abi_init<kestrel_recurrent_params>();
  params.cell = cell;
  Tensor saved;
  if (mode != Mode::inference) {
    outputs.push_back(Tensor::empty({0}, DType::u8, device));
    const auto bytes = ops::saved_bytes(device, op_of(KESTREL_OP_RECURRENT_LAYER, &params, inputs, outputs));
    if (!bytes) throw Unsupported("the device saves nothing of its own for recurrent_layer (op_saved_bytes)");
    saved = Tensor::empty({int64_t(*bytes)}, DType::u8, device);
    outputs.back() = saved;
  }
  ops::launch(device, op_of(KESTREL_OP_RECURRENT_LAYER, &params, inputs, outputs));
  const Reference want = reference(cell, s, l);
  const Tolerance tol = tolerance_for(dtype, 8);
  if (mode != Mode::backward) {
    r.expect_close(y, want.y, tol, "y");
    r.expect_close(h_last, want.h_last, tol, "last h");
    if (lstm) r.expect_close(c_last, want.c_last, tol, "last c");
    return;
  }
  Tensor dx = Tensor::empty({s.n, s.t, s.f}, dtype, device), dw_ih = Tensor::empty({gh, s.f}, dtype, device),
         dw_hh = Tensor::empty({gh, s.h}, dtype, device), db_ih = Tensor::empty({gh}, dtype, device),
         db_hh = Tensor::empty({gh}, dtype, device);
  std::vector<Tensor> backward_inputs{r.upload({s.n, s.t, s.h}, l.dy, dtype), x, y, w_ih, w_hh, h0};
  if (lstm) backward_inputs.push_back(c0);
  backward_inputs.push_back(saved);
  ops::launch(device, op_of(KESTREL_OP_RECURRENT_LAYER_BACKWARD, &params, backward_inputs,
                            {dx, dw_ih, dw_hh, db_ih, db_hh}));
  const Tolerance sums = tolerance_for(dtype, 16);  // summed over every step and row
  r.expect_close(dx, want.dx, tol, "dx");
  r.expect_close(dw_ih, want.dw_ih, sums, "dweight_ih");
  r.expect_close(dw_hh, want.dw_hh, sums, "dweight_hh");
  r.expect_close(db_ih, want.db_ih, sums, "dbias_ih");
  r.expect_close(db_hh, want.db_hh, sums, "dbias_hh");
}

}  // namespace

void recurrent_layer_cases(Runner& r) {
  const Sizes sizes[] = {{3, 4, 5, 6}, {2, 9, 3, 17}, {1, 1, 1, 1}};  // (N, T, F, H)
  for (kestrel_recurrent_cell cell :
       {KESTREL_RECURRENT_RNN_TANH, KESTREL_RECURRENT_RNN_RELU, KESTREL_RECURRENT_LSTM, KESTREL_RECURRENT_GRU})
    for (DType dtype : {DType::f32, DType::f64})
      for (const Sizes& s : sizes)
        for (Mode mode : {Mode::inference, Mode::training, Mode::backward})
          r.run(case_name({cell_name(cell), mode == Mode::inference ? "inference" : mode == Mode::training ? "training" : "backward",
                           std::string(dtype_name(dtype)), fmt::format("(N={}, T={}, F={}, H={})", s.n, s.t, s.f, s.h)}),
                false, [&] { one_case(r, cell, dtype, s, mode); });
}

}  // namespace kestrel::conformance
