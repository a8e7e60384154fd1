// Fused GRU cell (ABI 1.9), forward and backward side by side: a step's gate math after its two
// products (torch's GRU: the reset gate scales the state's share of the candidate, bias included), one
// pass over the batch's rows each way instead of a dozen element-wise ops. Rows may be strided (a step's
// slice of the whole sequence's input product); f32 arithmetic for f32 and 16-bit storage, double for f64.
#include <cmath>
#include <vector>

#include "cpu_ops.hpp"
#include "cpu_rows.hpp"

namespace kestrel_cpu {

namespace {

// One row: r, z = sigmoid(x + h) over the first 2H, n = tanh(x_n + r * h_n), h' = n + z * (h - n) (the
// composed path's order of operations), built per vector width. a: 3H scratch (the gates).
template <class E, class A = Acc<E>, class S = typename E::storage>
KESTREL_VECTOR_CLONES void forward_row(const S* xr, const S* hr, const S* state, S* h_next, S* gr, int64_t hidden,
                                       A* a) {
  auto in_place = [a](int64_t k) { return a[k]; };
  auto keep = [a](int64_t k, A v) { a[k] = v; };
  // `omp simd` on the plain loops: each element is computed alone (no loop-carried dependence), but
  // without it GCC leaves them scalar, unsure whether the rows overlap the scratch.
#pragma omp simd
  for (int64_t k = 0; k < 2 * hidden; ++k) a[k] = A(E::load(xr[k])) + A(E::load(hr[k]));
  map_staged<A>(0, 2 * hidden, in_place, keep, [](A v) { return A(1) / (A(1) + std::exp(-v)); });  // r, z
  const A *r = a, *z = a + hidden;
  A* n = a + 2 * hidden;
#pragma omp simd
  for (int64_t j = 0; j < hidden; ++j) n[j] = A(E::load(xr[2 * hidden + j])) + r[j] * A(E::load(hr[2 * hidden + j]));
  map_staged<A>(2 * hidden, 3 * hidden, in_place, keep, [](A v) { return std::tanh(v); });
#pragma omp simd
  for (int64_t j = 0; j < hidden; ++j)
    h_next[j] = E::store(typename E::compute(n[j] + z[j] * (A(E::load(state[j])) - n[j])));
#pragma omp simd
  for (int64_t k = 0; k < 3 * hidden; ++k) gr[k] = E::store(typename E::compute(a[k]));
}

// in0, in1 (N,3H) the products, in2 h (N,H) -> out0 h' (N,H), out1 the gates r, z, n (N,3H).
void gru_cell_forward(const kestrel_op& op) {
  const int64_t batch = op.inputs[2].shape[0], hidden = op.inputs[2].shape[1];
  dispatch_float(op.inputs[2].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using A = Acc<E>;
    const auto x = rows_of<S>(op.inputs[0]), h = rows_of<S>(op.inputs[1]), state = rows_of<S>(op.inputs[2]);
    const auto h_out = mutable_rows_of<S>(op.outputs[0]), gates = mutable_rows_of<S>(op.outputs[1]);
    parallel_for_split("kestrel::gru_cell", batch, batch * 3 * hidden * kTranscendentalWeight, [=](int64_t row) {
      thread_local std::vector<A> a;
      a.resize(size_t(3 * hidden));
      forward_row<E>(x[row], h[row], state[row], h_out[row], gates[row], hidden, a.data());
    });
  });
}

// With dh' the output's gradient: dn = dh' (1 - z), dz = dh' (h - n), the direct dh = dh' z; the
// pre-activations' gradients dn_pre = dn (1 - n^2), dr_pre = dn_pre h_n r (1 - r), dz_pre = dz z (1 - z);
// the input product gets (dr_pre, dz_pre, dn_pre), the state product (dr_pre, dz_pre, dn_pre r). One row,
// built per vector width.
template <class E, class A = Acc<E>, class S = typename E::storage>
KESTREL_VECTOR_CLONES void backward_row(const S* dh, const S* gates, const S* hr, const S* state, S* dx, S* drec,
                                        S* dstate, int64_t hidden) {
  auto store = [](A v) { return E::store(typename E::compute(v)); };
#pragma omp simd  // as in forward_row
  for (int64_t j = 0; j < hidden; ++j) {
    auto gate = [&](int k) { return A(E::load(gates[k * hidden + j])); };
    const A r = gate(0), z = gate(1), n = gate(2), grad = A(E::load(dh[j]));
    const A dn = grad * (A(1) - z) * (A(1) - n * n);
    const A dr = dn * A(E::load(hr[2 * hidden + j])) * r * (A(1) - r);
    const A dz = grad * (A(E::load(state[j])) - n) * z * (A(1) - z);
    dx[j] = drec[j] = store(dr);
    dx[hidden + j] = drec[hidden + j] = store(dz);
    dx[2 * hidden + j] = store(dn);
    drec[2 * hidden + j] = store(dn * r);
    dstate[j] = store(grad * z);
  }
}

// in0 dh' (N,H), in1 the gates (N,3H), in2 the state's product (N,3H), in3 h (N,H) -> out0, out1 (N,3H)
// the products' gradients, out2 (N,H) dh through z * h.
void gru_cell_backward(const kestrel_op& op) {
  const int64_t batch = op.inputs[3].shape[0], hidden = op.inputs[3].shape[1];
  dispatch_float(op.inputs[3].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const auto dh = rows_of<S>(op.inputs[0]), gates = rows_of<S>(op.inputs[1]), h = rows_of<S>(op.inputs[2]),
               state = rows_of<S>(op.inputs[3]);
    const auto dx = mutable_rows_of<S>(op.outputs[0]), drec = mutable_rows_of<S>(op.outputs[1]),
               dstate = mutable_rows_of<S>(op.outputs[2]);
    parallel_for_split("kestrel::gru_cell_backward", batch, batch * 3 * hidden, [=](int64_t row) {
      backward_row<E>(dh[row], gates[row], h[row], state[row], dx[row], drec[row], dstate[row], hidden);
    });
  });
}

}  // namespace

bool supports_gru_cell(const kestrel_op& op) { return kestrel::plugin_shapes::gru_cell_fits(op); }

void launch_gru_cell(const kestrel_op& op) {
  if (op.kind == KESTREL_OP_GRU_CELL_BACKWARD)
    gru_cell_backward(op);
  else
    gru_cell_forward(op);
}

}  // namespace kestrel_cpu
