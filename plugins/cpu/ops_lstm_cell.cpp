// Fused LSTM cell (ABI 1.7), forward and backward side by side: a step's gate math after its two
// products, one pass over the batch's rows each way instead of a dozen element-wise ops. Rows may be
// strided (a step's slice of the whole sequence's input product); f32 arithmetic for f32 and 16-bit
// storage, double for f64.
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"
#include "cpu_rows.hpp"

namespace kestrel_cpu {

namespace {

// One row's gates, cell and output from its two products: a few contiguous loops over H (the sum, the
// nonlinearities through the vector math, the cell), built per vector width. a: 5H scratch (the gates, then
// the cell before it is rounded to storage).
template <class E, class A = Acc<E>, class S = typename E::storage>
KESTREL_VECTOR_CLONES void forward_row(const S* xr, const S* hr, const S* cr, S* hn, S* cn, S* gr, int64_t hidden,
                                       A* a) {
  auto in_place = [a](int64_t k) { return a[k]; };
  auto keep = [a](int64_t k, A v) { a[k] = v; };
  // `omp simd` on the plain loops: each element is computed alone (no loop-carried dependence), but
  // without it GCC leaves them scalar, unsure whether the rows overlap the scratch.
#pragma omp simd
  for (int64_t k = 0; k < 4 * hidden; ++k) a[k] = A(E::load(xr[k])) + A(E::load(hr[k]));
  auto sigmoid = [](A v) { return A(1) / (A(1) + std::exp(-v)); };
  auto tanh = [](A v) { return std::tanh(v); };
  map_staged<A>(0, 2 * hidden, in_place, keep, sigmoid);           // i, f
  map_staged<A>(2 * hidden, 3 * hidden, in_place, keep, tanh);     // g
  map_staged<A>(3 * hidden, 4 * hidden, in_place, keep, sigmoid);  // o
  const A *i = a, *f = i + hidden, *g = f + hidden, *o = g + hidden;
  A* cell = a + 4 * hidden;
#pragma omp simd
  for (int64_t j = 0; j < hidden; ++j) {
    cell[j] = f[j] * A(E::load(cr[j])) + i[j] * g[j];
    cn[j] = E::store(typename E::compute(cell[j]));
  }
  map_staged<A>(0, hidden, [cell](int64_t j) { return cell[j]; },
                [hn, o](int64_t j, A tanh_cell) { hn[j] = E::store(typename E::compute(o[j] * tanh_cell)); },
                tanh);
#pragma omp simd
  for (int64_t k = 0; k < 4 * hidden; ++k) gr[k] = E::store(typename E::compute(a[k]));
}

// in0, in1 (N,4H) the products, in2 c (N,H) -> out0 h', out1 c' (N,H), out2 the gates (N,4H).
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
      thread_local std::vector<A> a;
      a.resize(size_t(5 * hidden));
      forward_row<E>(x[r], h[r], c[r], h_out[r], c_out[r], gates[r], hidden, a.data());
    });
  });
}

// One row of the backward below, built per vector width; tanh_c: H scratch for tanh(c').
template <class E, class A = Acc<E>, class S = typename E::storage>
KESTREL_VECTOR_CLONES void backward_row(const S* dh, const S* dc_next, const S* gates, const S* c, const S* c_next,
                                        S* dgates, S* dc, int64_t hidden, A* tanh_c) {
  auto store = [](A v) { return E::store(typename E::compute(v)); };
  map_staged<A>(0, hidden, [c_next](int64_t j) { return A(E::load(c_next[j])); },
                [tanh_c](int64_t j, A v) { tanh_c[j] = v; }, [](A v) { return std::tanh(v); });
#pragma omp simd  // as in forward_row
  for (int64_t j = 0; j < hidden; ++j) {
    auto gate = [&](int k) { return A(E::load(gates[k * hidden + j])); };
    const A i = gate(0), f = gate(1), g = gate(2), o = gate(3), grad_h = A(E::load(dh[j]));
    const A total = A(E::load(dc_next[j])) + grad_h * o * (A(1) - tanh_c[j] * tanh_c[j]);
    dgates[j] = store(total * g * i * (A(1) - i));
    dgates[hidden + j] = store(total * A(E::load(c[j])) * f * (A(1) - f));
    dgates[2 * hidden + j] = store(total * i * (A(1) - g * g));
    dgates[3 * hidden + j] = store(grad_h * tanh_c[j] * o * (A(1) - o));
    dc[j] = store(total * f);
  }
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
    parallel_for_split("kestrel::lstm_cell_backward", batch, batch * 4 * hidden * kTranscendentalWeight, [=](int64_t r) {
      thread_local std::vector<A> tanh_c;
      tanh_c.resize(size_t(hidden));
      backward_row<E>(dh[r], dc_next[r], gates[r], c[r], c_next[r], dgates[r], dc[r], hidden, tanh_c.data());
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
