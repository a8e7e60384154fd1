// Primitive tensor ops: shape checks and broadcasting here, the arithmetic in the device's plugin.
#include "kestrel/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <optional>

#include "../runtime/device_runtime.h"
#include "kestrel/plugin_env.hpp"

namespace kestrel::ops {
namespace {

// Collects tensors into a kestrel_op descriptor.
struct OpBuilder {
  kestrel_op op{};
  OpBuilder(kestrel_op_kind kind, const void* params) {
    set_abi_size(op);
    op.kind = kind;
    op.params = params;
  }
  OpBuilder& in(const Tensor& t) {
    op.inputs[room(op.num_inputs, "inputs")++] = t.descriptor();
    return *this;
  }
  OpBuilder& out(const Tensor& t) {
    op.outputs[room(op.num_outputs, "outputs")++] = t.descriptor();
    return *this;
  }
  // The count, while the descriptor has room for one more of its KESTREL_MAX_OP_TENSORS.
  static int32_t& room(int32_t& count, const char* what) {
    if (count >= KESTREL_MAX_OP_TENSORS)
      throw InvalidArgument(fmt::format("an op takes at most {} {}", KESTREL_MAX_OP_TENSORS, what));
    return count;
  }
};

// The plugin ABI minor version that added REDUCE's fn (0: there from the start). A plugin built against
// an older one is not asked: if it never range-checked fn, it could take the number for something else.
uint32_t reduce_fn_since(ReduceFn fn) {
  return fn == KESTREL_REDUCE_SUM_SQUARES ? 17 : fn == KESTREL_REDUCE_MAX_ABS ? 11 : 0;
}
bool knows_reduce_fn(const Device& device, ReduceFn fn) {
  return device.runtime().api().abi_minor >= reduce_fn_since(fn);
}
void need_reduce_fn(const Device& device, ReduceFn fn, const char* what) {
  if (!knows_reduce_fn(device, fn))
    throw Unsupported(fmt::format("{}: {}'s plugin was built against plugin ABI 1.{}, before this reduction (1.{})",
                                  what, device.str(), device.runtime().api().abi_minor, reduce_fn_since(fn)));
}

template <class P>
P make_params() {
  return abi_init<P>();
}

// The one device every tensor is on; otherwise a DeviceMismatch naming both and what to do.
const Device& same_device(const char* what, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) throw InvalidArgument(fmt::format("{}: an argument is an undefined tensor", what));
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      throw DeviceMismatch(fmt::format(
          "{}: tensors are on different devices: {} is on {} but {} is on {}. Move one with .to(device) first.",
          what, first->describe(), first->device().str(), t->describe(), t->device().str()));
    }
  }
  return first->device();
}

void same_dtype(const char* what, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw InvalidArgument(fmt::format("{}: dtypes differ ({} and {}): convert one with .to(dtype)", what,
                                      dtype_name(a.dtype()), dtype_name(b.dtype())));
}

void run(const char* what, const Device& device, const kestrel_op& op) {
  DeviceRuntime& runtime = device.runtime();
  if (!runtime.supports(op)) {
    std::string dtypes;
    for (int i = 0; i < op.num_inputs; ++i)
      dtypes += (i ? "," : "") + std::string(dtype_name(static_cast<DType>(op.inputs[i].dtype)));
    throw Unsupported(fmt::format("{} ({}) is not supported by the {} backend on {}", what,
                                  dtypes.empty() ? dtype_name(static_cast<DType>(op.outputs[0].dtype)) : dtypes,
                                  runtime.backend(), runtime.str()));
  }
  runtime.launch(op);
}

int wrap(int dim, int rank, const char* what) {
  int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) throw InvalidArgument(fmt::format("{}: dimension {} out of range for rank {}", what, dim, rank));
  return d;
}

void need_rank(const char* what, const Tensor& t, int rank) {
  if (t.rank() != rank)
    throw InvalidArgument(fmt::format("{}: expected a rank-{} tensor, got {}", what, rank, t.describe()));
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw InvalidArgument(fmt::format("shapes {} and {} cannot be broadcast together", shape_str(a), shape_str(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool supports(const Device& device, const kestrel_op& op) { return device.runtime().supports(op); }

std::optional<uint64_t> saved_bytes(const Device& device, const kestrel_op& op) {
  return device.runtime().saved_bytes(op);
}

bool keeps_saved_state(const Device& device) { return offers_saved_bytes(device.runtime().api()); }

kestrel_op make_op(kestrel_op_kind kind, const void* params, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs) {
  OpBuilder builder(kind, params);
  for (const Tensor& t : inputs) builder.in(t);
  for (const Tensor& t : outputs) builder.out(t);
  return builder.op;
}

namespace {
std::atomic<bool>& fused_flag() {
  static std::atomic<bool> enabled{!plugin_env::flag("KESTREL_DISABLE_FUSED")};
  return enabled;
}
}  // namespace

void set_fused_ops_enabled(bool enabled) { fused_flag() = enabled; }
bool fused_ops_enabled() { return fused_flag(); }

bool launch_if_supported(const Device& device, const kestrel_op& op) {
  DeviceRuntime& runtime = device.runtime();
  if (!fused_flag() || !runtime.supports(op)) return false;
  runtime.launch(op);
  return true;
}

std::optional<Tensor> launch_new_if_supported(kestrel_op_kind kind, const void* params,
                                              const std::vector<Tensor>& inputs, const Tensor& like) {
  const Device& device = like.device();
  if (!fused_flag() || !device.runtime().supports(make_op(kind, params, inputs, {like}))) return std::nullopt;
  Tensor out = Tensor::empty(like.shape(), like.dtype(), device);
  launch(device, make_op(kind, params, inputs, {out}));
  return out;
}

void launch(const Device& device, const kestrel_op& op) { run(op_kind_name(op.kind), device, op); }

void fill_(Tensor& out, double value) {
  auto params = make_params<kestrel_fill_params>();
  params.value = value;
  run("fill", out.device(), OpBuilder(KESTREL_OP_FILL, &params).out(out).op);
}

void copy_(Tensor& out, const Tensor& in) {
  const Device& device = same_device("copy", {&out, &in});
  if (out.shape() != in.shape())
    throw InvalidArgument(fmt::format("copy: shape {} into {}", shape_str(in.shape()), shape_str(out.shape())));
  run("copy", device, OpBuilder(KESTREL_OP_COPY, nullptr).in(in).out(out).op);
}

Tensor unary(UnaryFn fn, const Tensor& x, double alpha, double beta) {
  auto params = make_params<kestrel_unary_params>();
  params.fn = fn;
  params.alpha = alpha;
  params.beta = beta;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(unary_fn_name(fn), x.device(), OpBuilder(KESTREL_OP_UNARY, &params).in(x).out(out).op);
  return out;
}

void binary_(BinaryFn fn, Tensor& out, const Tensor& a, const Tensor& b) {
  const char* what = binary_fn_name(fn);
  const Device& device = same_device(what, {&out, &a, &b});
  same_dtype(what, a, b);
  same_dtype(what, a, out);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  if (shape != out.shape())
    throw InvalidArgument(fmt::format("{}: result has shape {} but the output is {}", what, shape_str(shape),
                                      shape_str(out.shape())));
  auto params = make_params<kestrel_binary_params>();
  params.fn = fn;
  run(what, device, OpBuilder(KESTREL_OP_BINARY, &params).in(a.expand(shape)).in(b.expand(shape)).out(out).op);
}

Tensor binary(BinaryFn fn, const Tensor& a, const Tensor& b) {
  same_device(binary_fn_name(fn), {&a, &b});
  Tensor out = Tensor::empty(broadcast_shapes(a.shape(), b.shape()), a.dtype(), a.device());
  binary_(fn, out, a, b);
  return out;
}

void reduce_into(ReduceFn fn, Tensor& out, const Tensor& x) {
  const char* what = reduce_fn_name(fn);
  bool fits = fn != KESTREL_REDUCE_ARGMAX && out.dtype() == x.dtype() && out.rank() == x.rank() && out.device() == x.device();
  for (int d = 0; fits && d < x.rank(); ++d) fits = out.size(d) == x.size(d) || out.size(d) == 1;
  if (!fits)
    throw InvalidArgument(fmt::format("{}: cannot reduce {} into {}; the output needs the input's dtype and rank "
                                      "with extent 1 on the reduced axes",
                                      what, x.describe(), out.describe()));
  need_reduce_fn(x.device(), fn, what);
  auto params = make_params<kestrel_reduce_params>();
  params.fn = fn;
  run(what, x.device(), OpBuilder(KESTREL_OP_REDUCE, &params).in(x).out(out).op);
}

Tensor reduce(ReduceFn fn, const Tensor& x, std::vector<int> dims, bool keepdim) {
  const char* what = reduce_fn_name(fn);
  if (dims.empty())
    for (int d = 0; d < x.rank(); ++d) dims.push_back(d);
  Shape kept = x.shape();
  std::vector<bool> reduced(x.rank(), false);
  for (int dim : dims) reduced[wrap(dim, x.rank(), what)] = true;
  for (int d = 0; d < x.rank(); ++d)
    if (reduced[d]) kept[d] = 1;
  if (fn == KESTREL_REDUCE_ARGMAX && std::count(reduced.begin(), reduced.end(), true) != 1)
    throw InvalidArgument("argmax: reduce exactly one dimension");
  for (int d = 0; d < x.rank(); ++d)
    if (reduced[d] && x.shape()[d] == 0 && fn != KESTREL_REDUCE_SUM && fn != KESTREL_REDUCE_MEAN &&
        fn != KESTREL_REDUCE_SUM_SQUARES)  // sums of nothing are 0 (a mean's NaN)
      throw InvalidArgument(fmt::format("{}: cannot reduce an empty dimension of {}", what, x.describe()));
  need_reduce_fn(x.device(), fn, what);
  DType out_dtype = fn == KESTREL_REDUCE_ARGMAX ? DType::i64 : x.dtype();
  Tensor out = Tensor::empty(kept, out_dtype, x.device());
  auto params = make_params<kestrel_reduce_params>();
  params.fn = fn;
  run(what, x.device(), OpBuilder(KESTREL_OP_REDUCE, &params).in(x).out(out).op);
  if (keepdim) return out;
  Shape squeezed;
  for (int d = 0; d < x.rank(); ++d)
    if (!reduced[d]) squeezed.push_back(x.shape()[d]);
  return out.view(squeezed);
}

namespace {
// All of x reduced with fn into a 0-d tensor, or nothing where x's device lacks fn (MAX_ABS is ABI 1.11's,
// and optional): the one output serves the question and the answer.
std::optional<Tensor> reduce_whole(ReduceFn fn, const Tensor& x) {
  if (!knows_reduce_fn(x.device(), fn)) return std::nullopt;
  auto params = make_params<kestrel_reduce_params>();
  params.fn = fn;
  const Tensor out = Tensor::empty(Shape(size_t(x.rank()), 1), x.dtype(), x.device());
  const kestrel_op op = OpBuilder(KESTREL_OP_REDUCE, &params).in(x).out(out).op;
  if (!supports(x.device(), op)) return std::nullopt;
  x.device().runtime().launch(op);
  return out.view({});
}
}  // namespace

Tensor nonfinite_flag(const Tensor& x) {
  if (!is_floating(x.dtype())) throw InvalidArgument("nonfinite_flag: " + x.describe() + " is not floating");
  // m * 0 is 0 for a finite m and NaN for a NaN or an infinity; a NaN wins every reduction (the ABI's
  // rule, held by the conformance suite). With m = max |x| that is one read of x and no temporary of its
  // size: this runs over every gradient in each loss-scaled step. A device without MAX_ABS gets
  // max(x) * 0 + min(x) * 0, two reads.
  const Tensor zero = Tensor::full({}, 0.0, x.dtype(), x.device());
  if (x.numel() == 0) return zero;  // (the max of nothing is NaN)
  Tensor sum;
  if (const std::optional<Tensor> largest = reduce_whole(KESTREL_REDUCE_MAX_ABS, x)) {
    sum = binary(KESTREL_BINARY_MUL, *largest, zero);
  } else {
    const Tensor high = binary(KESTREL_BINARY_MUL, reduce(KESTREL_REDUCE_MAX, x), zero);
    sum = binary(KESTREL_BINARY_ADD, high, binary(KESTREL_BINARY_MUL, reduce(KESTREL_REDUCE_MIN, x), zero));
  }
  return binary(KESTREL_BINARY_NE, sum, sum);
}

namespace {
// sum_of_squares's slices where it squares and sums (2^24 elements: GPT-2 small's 124M gradients would
// need 500 MB of squares at once).
constexpr int64_t kSquaresSlice = int64_t(1) << 24;

// Whether x's device may be asked for SUM_SQUARES: fused ops on, and a plugin that knows the fn.
bool may_ask_sum_squares(const Tensor& x) {
  return fused_ops_enabled() && x.numel() > 0 && knows_reduce_fn(x.device(), KESTREL_REDUCE_SUM_SQUARES);
}
}  // namespace

Tensor sum_of_squares(const Tensor& x) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw InvalidArgument("sum_of_squares: " + x.describe() +
                          " is not f32 or f64 (16-bit squares would be summed into a 16-bit result)");
  if (may_ask_sum_squares(x))
    if (const std::optional<Tensor> sum = reduce_whole(KESTREL_REDUCE_SUM_SQUARES, x)) return *sum;
  const Tensor flat = x.is_contiguous() ? x.view({x.numel()}) : x.contiguous().view({x.numel()});
  Tensor sum = Tensor::zeros({}, x.dtype(), x.device());
  for (int64_t begin = 0; begin < flat.numel(); begin += kSquaresSlice) {
    const Tensor slice = flat.slice(0, begin, std::min(flat.numel(), begin + kSquaresSlice));  // (slice)
    sum = binary(KESTREL_BINARY_ADD, sum, reduce(KESTREL_REDUCE_SUM, unary(KESTREL_UNARY_SQUARE, slice)));
  }
  return sum;
}

int64_t sum_of_squares_temporary_bytes(const Tensor& x) {
  if (may_ask_sum_squares(x)) {
    auto params = make_params<kestrel_reduce_params>();
    params.fn = KESTREL_REDUCE_SUM_SQUARES;
    const Tensor probe = Tensor::empty(Shape(size_t(x.rank()), 1), x.dtype(), x.device());
    if (supports(x.device(), OpBuilder(KESTREL_OP_REDUCE, &params).in(x).out(probe).op)) return 0;
  }
  const int64_t size = int64_t(dtype_size(x.dtype()));
  // A slice's squares, and a strided x's contiguous copy
  return std::min(x.numel(), kSquaresSlice) * size + (x.is_contiguous() ? 0 : x.numel() * size);
}

bool all_finite(const Tensor& x) {
  if (!is_floating(x.dtype()) || x.numel() == 0) return true;
  return nonfinite_flag(x).to_doubles()[0] == 0.0;
}

namespace {
bool sixteen_bit(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }
}  // namespace

void gemm_(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const Device& device = same_device("matmul", {&out, &a, &b});
  same_dtype("matmul", a, b);
  const bool widening = out.dtype() == DType::f32 && sixteen_bit(a.dtype());  // mixed precision's products
  if (!widening) same_dtype("matmul", a, out);
  int rank = out.rank();
  if ((rank != 2 && rank != 3) || a.rank() != rank || b.rank() != rank)
    throw InvalidArgument(fmt::format("matmul: operands must all be rank 2 or all rank 3, got {}, {} -> {}",
                                      a.describe(), b.describe(), out.describe()));
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (b.size(-2) != k || out.size(-2) != m || out.size(-1) != n || (rank == 3 && (a.size(0) != out.size(0) ||
                                                                                 b.size(0) != out.size(0))))
    throw InvalidArgument(fmt::format("matmul: shapes {} @ {} -> {} do not match", shape_str(a.shape()),
                                      shape_str(b.shape()), shape_str(out.shape())));
  auto params = make_params<kestrel_gemm_params>();
  params.alpha = alpha;
  params.beta = beta;
  const kestrel_op op = OpBuilder(KESTREL_OP_GEMM, &params).in(a).in(b).out(out).op;
  if (!widening) return run("matmul", device, op);
  if (launch_if_supported(device, op)) return;  // ABI 1.6: the f32 product as the device accumulated it
  // A device that multiplies within one dtype only: the product rounded to the operands' dtype, widened.
  Tensor product = Tensor::empty(out.shape(), a.dtype(), device);
  gemm_(product, a, b, alpha, 0.0);
  if (beta == 0.0) return copy_(out, product);
  binary_(KESTREL_BINARY_ADD, out, beta == 1.0 ? out : unary(KESTREL_UNARY_AFFINE, out, beta, 0.0), product.to(DType::f32));
}

void gemm_with_row_sums_(Tensor& out, Tensor& row_sums, const Tensor& a, const Tensor& b, double alpha, double beta) {
  if (out.rank() != 2 || row_sums.rank() != 1 || row_sums.size(0) != a.size(0) || row_sums.dtype() != out.dtype())
    throw InvalidArgument(fmt::format("matmul: row sums {} do not fit {} @ {} -> {}; they take the rows of the first "
                                      "operand, in the result's dtype",
                                      row_sums.describe(), a.describe(), b.describe(), out.describe()));
  auto params = make_params<kestrel_gemm_params>();
  params.alpha = alpha;
  params.beta = beta;
  const kestrel_op op = OpBuilder(KESTREL_OP_GEMM, &params).in(a).in(b).out(out).out(row_sums).op;
  if (launch_if_supported(out.device(), op)) return;
  gemm_(out, a, b, alpha, beta);
  Tensor kept = row_sums.view({row_sums.size(0), 1});  // (M, 1)
  if (a.dtype() == row_sums.dtype()) return reduce_into(KESTREL_REDUCE_SUM, kept, a);
  Tensor sums = Tensor::empty(kept.shape(), a.dtype(), a.device());  // 16-bit rows, summed in their dtype
  reduce_into(KESTREL_REDUCE_SUM, sums, a);
  copy_(kept, sums);
}

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul(a, b, a.dtype()); }

Tensor matmul(const Tensor& a, const Tensor& b, DType out_dtype) {
  same_device("matmul", {&a, &b});
  if (a.rank() < 2 || a.rank() > 3 || b.rank() < 2 || b.rank() > 3)
    throw InvalidArgument(fmt::format("matmul: expected rank-2 or rank-3 operands, got {} and {}", a.describe(),
                                      b.describe()));
  if (a.size(-1) != b.size(-2))
    throw InvalidArgument(fmt::format("matmul: inner dimensions differ: {} @ {}", shape_str(a.shape()),
                                      shape_str(b.shape())));
  if (a.rank() == 2 && b.rank() == 2) {
    Tensor out = Tensor::empty({a.size(0), b.size(1)}, out_dtype, a.device());
    gemm_(out, a, b);
    return out;
  }
  int64_t batch = a.rank() == 3 ? a.size(0) : b.size(0);
  if (a.rank() == 3 && b.rank() == 3 && a.size(0) != b.size(0) && a.size(0) != 1 && b.size(0) != 1)
    throw InvalidArgument(fmt::format("matmul: batch sizes differ: {} @ {}", shape_str(a.shape()), shape_str(b.shape())));
  if (a.rank() == 3 && b.rank() == 3) batch = std::max(a.size(0), b.size(0));
  auto batched = [batch](const Tensor& t) {
    Tensor t3 = t.rank() == 2 ? t.unsqueeze(0) : t;
    return t3.expand({batch, t3.size(1), t3.size(2)});
  };
  Tensor out = Tensor::empty({batch, a.size(-2), b.size(-1)}, out_dtype, a.device());
  gemm_(out, batched(a), batched(b));
  return out;
}

Tensor gather(const Tensor& x, int axis, const Tensor& index) {
  same_device("gather", {&x, &index});
  if (index.rank() != x.rank())
    throw InvalidArgument(fmt::format("gather: index {} must have the rank of {}", index.describe(), x.describe()));
  auto params = make_params<kestrel_index_params>();
  params.axis = wrap(axis, x.rank(), "gather");
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  run("gather", x.device(), OpBuilder(KESTREL_OP_GATHER, &params).in(x).in(index).out(out).op);
  return out;
}

void scatter_add_(Tensor& out, int axis, const Tensor& index, const Tensor& src) {
  const Device& device = same_device("scatter_add", {&out, &index, &src});
  same_dtype("scatter_add", out, src);
  if (index.shape() != src.shape() || index.rank() != out.rank())
    throw InvalidArgument(fmt::format("scatter_add: index {} and src {} must share a shape of out's rank ({})",
                                      index.describe(), src.describe(), out.describe()));
  auto params = make_params<kestrel_index_params>();
  params.axis = wrap(axis, out.rank(), "scatter_add");
  run("scatter_add", device, OpBuilder(KESTREL_OP_SCATTER_ADD, &params).in(src).in(index).out(out).op);
}

namespace {
thread_local const CounterBaseScope* active_counter_base = nullptr;
}

CounterBaseScope::CounterBaseScope(const Tensor& base, uint64_t host_base)
    : previous_(active_counter_base), base_(base), host_base_(host_base) {
  if (base.dtype() != DType::i64 || base.numel() != 1)
    throw InvalidArgument("CounterBaseScope: the counter base must be a one-element i64 tensor, got " + base.describe());
  active_counter_base = this;
}
CounterBaseScope::~CounterBaseScope() { active_counter_base = previous_; }

Tensor counter_base(const Device& device, uint64_t& offset) {
  if (!active_counter_base || !(active_counter_base->base_.device() == device)) return Tensor();
  if (offset < active_counter_base->host_base_)
    throw InvalidArgument(fmt::format("counter-based draw: offset {} lies before the counter base {}", offset,
                                      active_counter_base->host_base_));
  offset -= active_counter_base->host_base_;
  return active_counter_base->base_;
}

void random_(Tensor& out, kestrel_distribution distribution, uint64_t seed, uint64_t offset, double a, double b) {
  auto params = make_params<kestrel_random_params>();
  params.distribution = distribution;
  params.seed = seed;
  params.a = a;
  params.b = b;
  OpBuilder builder(KESTREL_OP_RANDOM, &params);
  const uint64_t absolute_offset = offset;  // counter_base makes `offset` relative to a captured step's base
  if (Tensor base = counter_base(out.device(), offset); base.defined()) builder.in(base);
  params.offset = offset;
  builder.out(out);
  // A device that draws f32 only (Vulkan) draws a 16-bit tensor's numbers in f32 and rounds them as they
  // are copied: plugin.h's element -> counter mapping does not depend on the dtype, so a Bernoulli mask
  // (dropout under autocast) is the same bits as on a device that draws 16 bits itself.
  if ((out.dtype() == DType::f16 || out.dtype() == DType::bf16) && !supports(out.device(), builder.op)) {
    Tensor wide = Tensor::empty(out.shape(), DType::f32, out.device());
    random_(wide, distribution, seed, absolute_offset, a, b);
    copy_(out, wide);
    return;
  }
  run("random", out.device(), builder.op);
}

namespace {
kestrel_window_params window_params(const Window& w, kestrel_pool_mode mode) {
  auto params = make_params<kestrel_window_params>();
  params.kernel_h = w.kernel_h;
  params.kernel_w = w.kernel_w;
  params.stride_h = w.stride_h;
  params.stride_w = w.stride_w;
  params.pad_h = w.pad_h;
  params.pad_w = w.pad_w;
  params.dilation_h = w.dilation_h;
  params.dilation_w = w.dilation_w;
  params.mode = mode;
  return params;
}

void check_window(const char* what, const Window& w, int64_t h, int64_t width) {
  if (w.kernel_h < 1 || w.kernel_w < 1 || w.stride_h < 1 || w.stride_w < 1 || w.pad_h < 0 || w.pad_w < 0 ||
      w.dilation_h < 1 || w.dilation_w < 1)
    throw InvalidArgument(fmt::format("{}: kernel, stride and dilation must be >= 1 and padding >= 0", what));
  if (w.out_h(h) < 1 || w.out_w(width) < 1)
    throw InvalidArgument(fmt::format("{}: a {}x{} window does not fit a {}x{} input with padding {}x{}", what,
                                      w.kernel_h, w.kernel_w, h, width, w.pad_h, w.pad_w));
}
}  // namespace

Tensor im2col(const Tensor& x, const Window& window) {
  need_rank("im2col", x, 4);
  check_window("im2col", window, x.size(2), x.size(3));
  auto params = window_params(window, KESTREL_POOL_MAX);
  Tensor out = Tensor::empty({x.size(0), x.size(1) * window.kernel_h * window.kernel_w,
                              window.out_h(x.size(2)) * window.out_w(x.size(3))},
                             x.dtype(), x.device());
  run("im2col", x.device(), OpBuilder(KESTREL_OP_IM2COL, &params).in(x).out(out).op);
  return out;
}

Tensor col2im(const Tensor& cols, const Window& window, int64_t channels, int64_t height, int64_t width) {
  need_rank("col2im", cols, 3);
  check_window("col2im", window, height, width);
  if (cols.size(1) != channels * window.kernel_h * window.kernel_w ||
      cols.size(2) != window.out_h(height) * window.out_w(width))
    throw InvalidArgument(fmt::format("col2im: {} does not match {} channels of {}x{}", cols.describe(), channels,
                                      height, width));
  auto params = window_params(window, KESTREL_POOL_MAX);
  Tensor out = Tensor::empty({cols.size(0), channels, height, width}, cols.dtype(), cols.device());
  run("col2im", cols.device(), OpBuilder(KESTREL_OP_COL2IM, &params).in(cols).out(out).op);
  return out;
}

PoolResult pool2d(const Tensor& x, const Window& window, kestrel_pool_mode mode) {
  need_rank("pool2d", x, 4);
  check_window("pool2d", window, x.size(2), x.size(3));
  auto params = window_params(window, mode);
  Shape shape{x.size(0), x.size(1), window.out_h(x.size(2)), window.out_w(x.size(3))};
  PoolResult result{Tensor::empty(shape, x.dtype(), x.device()), {}};
  OpBuilder builder(KESTREL_OP_POOL2D, &params);
  builder.in(x).out(result.out);
  if (mode == KESTREL_POOL_MAX) {
    result.indices = Tensor::empty(shape, DType::i64, x.device());
    builder.out(result.indices);
  }
  run("pool2d", x.device(), builder.op);
  return result;
}

Tensor pool2d_backward(const Tensor& dy, const Tensor& indices, const Window& window, kestrel_pool_mode mode,
                       const Shape& input_shape) {
  need_rank("pool2d_backward", dy, 4);
  auto params = window_params(window, mode);
  Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device());
  OpBuilder builder(KESTREL_OP_POOL2D_BACKWARD, &params);
  builder.in(dy);
  if (mode == KESTREL_POOL_MAX) {
    same_device("pool2d_backward", {&dy, &indices});
    builder.in(indices);
  }
  run("pool2d_backward", dy.device(), builder.out(dx).op);
  return dx;
}

}  // namespace kestrel::ops
