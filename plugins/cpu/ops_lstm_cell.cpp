// Fused LSTM cell (ABI 1.7), forward and backward side by side: a step's gate math after its two
// products, one pass over the batch's rows each way instead of a dozen element-wise ops. Rows may be
// strided (a step's slice of the whole sequence's input product); f32 arithmetic for f32 and 16-bit
// storage, double for f64.
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// Row r of a (rows, cols) tensor whose rows are contiguous.
template <class S>
struct Rows {
  S* base;
  int64_t stride;
  S* operator[](int64_t r) const { return base + r * stride; }
};
template <class S>
Rows<const S> rows_of(const kestrel_tensor& t) {
  return {static_cast<const S*>(t.buffer->data) + t.offset, t.strides[0]};
}
template <class S>
Rows<S> mutable_rows_of(const kestrel_tensor& t) {
  return {static_cast<S*>(t.buffer->data) + t.offset, t.strides[0]};
}

template <class E>
using Acc = std::conditional_t<std::is_same_v<typename E::storage, double>, double, float>;

template <class A>
A sigmoid(A x) { return A(1) / (A(1) + std::exp(-x)); }

// The pool splits loops by elements touched; a gate element costs a transcendental function or two,
// several times a plain element, so the rows count this many times over.
constexpr int64_t kTranscendentalWeight = 8;

// in0, in1 (N,4H) the products, in2 c (N,H) -> out0 h', out1 c' (N,H), out2 the gates (N,4H). Each row
// runs as a few contiguous loops over H (the sum, each gate's nonlinearity, the cell), which the compiler
// keeps tight, rather than one loop doing everything per element.
void lstm_cell_forward(const kestrel_op& op) {
  const int64_t batch = op.inputs[2].shape[0], hidden = op.inputs[2].shape[1];
  dispatch_float(op.inputs[2].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const auto x = rows_of<S>(op.inputs[0]), h = rows_of<S>(op.inputs[1]), c = rows_of<S>(op.inputs[2]);
    const auto h_out = mutable_rows_of<S>(op.outputs[0]), c_out = mutable_rows_of<S>(op.outputs[1]),
               gates = mutable_rows_of<S>(op.outputs[2]);
    parallel_for_split("kestrel::lstm_cell", batch, batch * 4 * hidden * kTranscendentalWeight, [=](int64_t r) {
      thread_local std::vector<A> a;  // the row's gates: pre-activation, then activated
      a.resize(size_t(4 * hidden));
      const S *xr = x[r], *hr = h[r];
      for (int64_t k = 0; k < 4 * hidden; ++k) a[k] = A(E::load(xr[k])) + A(E::load(hr[k]));
      for (int64_t k = 0; k < 2 * hidden; ++k) a[k] = sigmoid(a[k]);                       // i, f
      for (int64_t k = 2 * hidden; k < 3 * hidden; ++k) a[k] = std::tanh(a[k]);           // g
      for (int64_t k = 3 * hidden; k < 4 * hidden; ++k) a[k] = sigmoid(a[k]);             // o
      const A *i = a.data(), *f = i + hidden, *g = f + hidden, *o = g + hidden;
      const S* cr = c[r];
      S *hn = h_out[r], *cn = c_out[r], *gr = gates[r];
      for (int64_t j = 0; j < hidden; ++j) {
        const A cell = f[j] * A(E::load(cr[j])) + i[j] * g[j];
        cn[j] = E::store(typename E::compute(cell));
        hn[j] = E::store(typename E::compute(o[j] * std::tanh(cell)));
      }
      for (int64_t k = 0; k < 4 * hidden; ++k) gr[k] = E::store(typename E::compute(a[k]));
    });
  });
}

// With dc_total = dc' + dh' * o * (1 - tanh(c')^2): the gates' pre-activation gradients
// di * i(1-i), df * f(1-f), dg * (1-g^2), do * o(1-o) where di = dc_total g, df = dc_total c,
// dg = dc_total i, do = dh' tanh(c'); and dc = dc_total f.
void lstm_cell_backward(const kestrel_op& op) {
  const int64_t batch = op.inputs[3].shape[0], hidden = op.inputs[3].shape[1];
  dispatch_float(op.inputs[3].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const auto dh = rows_of<S>(op.inputs[0]), dc_next = rows_of<S>(op.inputs[1]), gates = rows_of<S>(op.inputs[2]),
               c = rows_of<S>(op.inputs[3]), c_next = rows_of<S>(op.inputs[4]);
    const auto dgates = mutable_rows_of<S>(op.outputs[0]), dc = mutable_rows_of<S>(op.outputs[1]);
    auto store = [](A v) { return E::store(typename E::compute(v)); };
    parallel_for_split("kestrel::lstm_cell_backward", batch, batch * 4 * hidden * kTranscendentalWeight, [=](int64_t r) {
      for (int64_t j = 0; j < hidden; ++j) {
        auto gate = [&](int k) { return A(E::load(gates[r][k * hidden + j])); };
        const A i = gate(0), f = gate(1), g = gate(2), o = gate(3);
        const A tanh_c = std::tanh(A(E::load(c_next[r][j]))), grad_h = A(E::load(dh[r][j]));
        const A total = A(E::load(dc_next[r][j])) + grad_h * o * (A(1) - tanh_c * tanh_c);
        dgates[r][j] = store(total * g * i * (A(1) - i));
        dgates[r][hidden + j] = store(total * A(E::load(c[r][j])) * f * (A(1) - f));
        dgates[r][2 * hidden + j] = store(total * i * (A(1) - g * g));
        dgates[r][3 * hidden + j] = store(grad_h * tanh_c * o * (A(1) - o));
        dc[r][j] = store(total * f);
      }
    });
  });
}

}  // namespace

bool supports_lstm_cell(const kestrel_op& op) { return kestrel::plugin_shapes::lstm_cell_fits(op); }

void launch_lstm_cell(const kestrel_op& op) {
  if (op.kind == KESTREL_OP_LSTM_CELL_BACKWARD)
    lstm_cell_backward(op);
  else
    lstm_cell_forward(op);
}

}  // namespace kestrel_cpu
