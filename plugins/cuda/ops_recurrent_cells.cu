// The fused LSTM cell (ABI 1.7) and GRU cell (1.9), forward and backward side by side: a step's gate
// math after its two products, one thread per cell (row b, unit j) of the (N, H) state, in place of the
// dozen element-wise launches the composed step takes. The arithmetic is the CPU plugin's
// (plugins/cpu/ops_lstm_cell.cpp, ops_gru_cell.cpp): f32 for f32 and 16-bit storage, double for f64, each
// result rounded once to storage, the gates kept for backward as stored. Rows may be strided (a time
// step's slice of a batch-first sequence's products).
#include "cuda_kernels.cuh"

namespace kestrel_cuda {

namespace {

// An (N, width) matrix whose rows are `stride` elements apart: element (b, j) at base[b * stride + j].
template <class S>
struct Rows {
  S* base;
  int64_t stride;
  __device__ S& operator()(int64_t b, int64_t j) const { return base[b * stride + j]; }
};

// An op's inputs and outputs as rows (at most 5 inputs and 3 outputs in these families).
template <class S>
struct CellTensors {
  Rows<const S> in[5];
  Rows<S> out[3];
};

template <class S>
CellTensors<S> cell_tensors(const kestrel_op& op) {
  CellTensors<S> t{};
  for (int i = 0; i < op.num_inputs; ++i) {
    const TensorRef r = ref(op.inputs[i]);
    t.in[i] = {reinterpret_cast<const S*>(r.base), r.strides[0]};
  }
  for (int i = 0; i < op.num_outputs; ++i) {
    const TensorRef r = ref(op.outputs[i]);
    t.out[i] = {reinterpret_cast<S*>(r.base), r.strides[0]};
  }
  return t;
}

template <class A>
__device__ A sigmoid(A v) {
  return A(1) / (A(1) + exp(-v));
}

// ---- LSTM ----

// x, hh (N, 4H) the products (gates i, f, g, o), c (N, H) -> h' = o tanh(c'), c' = f c + i g (N, H), and
// the gates after their nonlinearities (N, 4H). h' takes c' before it is rounded, as the CPU's does.
template <class E, class S = typename E::storage, class A = typename E::compute>
__global__ void lstm_cell_kernel(CellTensors<S> t, int64_t hidden, int64_t n) {
  const auto &x = t.in[0], &hh = t.in[1], &c = t.in[2];
  const auto &h_next = t.out[0], &c_next = t.out[1], &gates = t.out[2];
  KESTREL_GRID_STRIDE_LOOP(index, n) {
    const int64_t b = index / hidden, j = index % hidden;
    auto pre = [&](int k) { return A(E::load(x(b, k * hidden + j))) + A(E::load(hh(b, k * hidden + j))); };
    const A i = sigmoid(pre(0)), f = sigmoid(pre(1)), g = tanh(pre(2)), o = sigmoid(pre(3));
    const A cell = f * A(E::load(c(b, j))) + i * g;
    c_next(b, j) = E::store(cell);
    h_next(b, j) = E::store(o * tanh(cell));
    gates(b, j) = E::store(i);
    gates(b, hidden + j) = E::store(f);
    gates(b, 2 * hidden + j) = E::store(g);
    gates(b, 3 * hidden + j) = E::store(o);
  }
}

// With total = dc' + dh' o (1 - tanh(c')^2): the products' gradient (total g i(1-i), total c f(1-f),
// total i (1-g^2), dh' tanh(c') o(1-o)) (N, 4H) and dc = total f (N, H).
template <class E, class S = typename E::storage, class A = typename E::compute>
__global__ void lstm_cell_backward_kernel(CellTensors<S> t, int64_t hidden, int64_t n) {
  const auto &dh = t.in[0], &dc_next = t.in[1], &gates = t.in[2], &c = t.in[3], &c_next = t.in[4];
  const auto &dgates = t.out[0], &dc = t.out[1];
  KESTREL_GRID_STRIDE_LOOP(index, n) {
    const int64_t b = index / hidden, j = index % hidden;
    auto gate = [&](int k) { return A(E::load(gates(b, k * hidden + j))); };
    const A i = gate(0), f = gate(1), g = gate(2), o = gate(3), grad_h = A(E::load(dh(b, j)));
    const A tanh_c = tanh(A(E::load(c_next(b, j))));
    const A total = A(E::load(dc_next(b, j))) + grad_h * o * (A(1) - tanh_c * tanh_c);
    dgates(b, j) = E::store(total * g * i * (A(1) - i));
    dgates(b, hidden + j) = E::store(total * A(E::load(c(b, j))) * f * (A(1) - f));
    dgates(b, 2 * hidden + j) = E::store(total * i * (A(1) - g * g));
    dgates(b, 3 * hidden + j) = E::store(grad_h * tanh_c * o * (A(1) - o));
    dc(b, j) = E::store(total * f);
  }
}

// ---- GRU ----

// x, hh (N, 3H) the products (gates r, z, n), h (N, H) -> h' = n + z (h - n) (the composed path's order),
// and r, z, n (N, 3H).
template <class E, class S = typename E::storage, class A = typename E::compute>
__global__ void gru_cell_kernel(CellTensors<S> t, int64_t hidden, int64_t n) {
  const auto &x = t.in[0], &hh = t.in[1], &h = t.in[2];
  const auto &h_next = t.out[0], &gates = t.out[1];
  KESTREL_GRID_STRIDE_LOOP(index, n) {
    const int64_t b = index / hidden, j = index % hidden;
    auto in = [&](int k) { return A(E::load(x(b, k * hidden + j))); };
    auto state = [&](int k) { return A(E::load(hh(b, k * hidden + j))); };
    const A r = sigmoid(in(0) + state(0)), z = sigmoid(in(1) + state(1)), candidate = tanh(in(2) + r * state(2));
    h_next(b, j) = E::store(candidate + z * (A(E::load(h(b, j))) - candidate));
    gates(b, j) = E::store(r);
    gates(b, hidden + j) = E::store(z);
    gates(b, 2 * hidden + j) = E::store(candidate);
  }
}

// dn = dh' (1 - z)(1 - n^2), dr = dn h_n r(1 - r), dz = dh' (h - n) z(1 - z): the input product gets
// (dr, dz, dn), the state product (dr, dz, dn r) (N, 3H), and dh through z h alone = dh' z (N, H).
template <class E, class S = typename E::storage, class A = typename E::compute>
__global__ void gru_cell_backward_kernel(CellTensors<S> t, int64_t hidden, int64_t n) {
  const auto &dh = t.in[0], &gates = t.in[1], &hh = t.in[2], &h = t.in[3];
  const auto &dx = t.out[0], &dhh = t.out[1], &dstate = t.out[2];
  KESTREL_GRID_STRIDE_LOOP(index, n) {
    const int64_t b = index / hidden, j = index % hidden;
    auto gate = [&](int k) { return A(E::load(gates(b, k * hidden + j))); };
    const A r = gate(0), z = gate(1), candidate = gate(2), grad = A(E::load(dh(b, j)));
    const A dn = grad * (A(1) - z) * (A(1) - candidate * candidate);
    const A dr = dn * A(E::load(hh(b, 2 * hidden + j))) * r * (A(1) - r);
    const A dz = grad * (A(E::load(h(b, j))) - candidate) * z * (A(1) - z);
    dx(b, j) = dhh(b, j) = E::store(dr);
    dx(b, hidden + j) = dhh(b, hidden + j) = E::store(dz);
    dx(b, 2 * hidden + j) = E::store(dn);
    dhh(b, 2 * hidden + j) = E::store(dn * r);
    dstate(b, j) = E::store(grad * z);
  }
}

// Launches kernel_for(element type) over the cells of the state (N, H), op's input `state`, in its dtype.
template <class KernelFor>
void launch_cells(kestrel_stream& s, const kestrel_op& op, int state, const char* what, KernelFor kernel_for) {
  const int64_t hidden = op.inputs[state].shape[1], n = op.inputs[state].shape[0] * hidden;
  if (n == 0) return;
  dispatch_float(op.inputs[state].dtype, [&](auto elem) {
    using S = typename decltype(elem)::storage;
    kernel_for(elem)<<<grid_for(n), kBlock, 0, s.cuda>>>(cell_tensors<S>(op), hidden, n);
  });
  check_launch(what);
}

}  // namespace

bool supports_lstm_cell(const kestrel_op& op) { return kestrel::plugin_shapes::lstm_cell_fits(op); }

// LSTM_CELL: in0, in1 (N,4H), in2 c (N,H) -> h', c' (N,H), gates (N,4H). LSTM_CELL_BACKWARD: in0 dh', in1
// dc' (N,H), in2 gates (N,4H), in3 c, in4 c' (N,H) -> out0 (N,4H), out1 dc (N,H).
void launch_lstm_cell(kestrel_stream& s, const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_LSTM_CELL_BACKWARD;
  launch_cells(s, op, backward ? 3 : 2, backward ? "lstm_cell_backward" : "lstm_cell", [&](auto elem) {
    using E = decltype(elem);
    return backward ? lstm_cell_backward_kernel<E> : lstm_cell_kernel<E>;
  });
}

bool supports_gru_cell(const kestrel_op& op) { return kestrel::plugin_shapes::gru_cell_fits(op); }

// GRU_CELL: in0, in1 (N,3H), in2 h (N,H) -> h' (N,H), gates (N,3H). GRU_CELL_BACKWARD: in0 dh' (N,H), in1
// gates, in2 the state's product (N,3H), in3 h (N,H) -> out0, out1 (N,3H), out2 (N,H).
void launch_gru_cell(kestrel_stream& s, const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_GRU_CELL_BACKWARD;
  launch_cells(s, op, backward ? 3 : 2, backward ? "gru_cell_backward" : "gru_cell", [&](auto elem) {
    using E = decltype(elem);
    return backward ? gru_cell_backward_kernel<E> : gru_cell_kernel<E>;
  });
}

}  // namespace kestrel_cuda
