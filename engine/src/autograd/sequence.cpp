// Slicing and joining along an axis: the pieces of a sequence a recurrent layer steps through, and the
// outputs it puts back together. Forward and backward side by side.
#include <fmt/format.h>

#include <functional>

#include "autocast.h"
#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

namespace {

int wrap_axis(int axis, int rank, const char* op) {
  const int wrapped = axis < 0 ? axis + rank : axis;
  if (wrapped < 0 || wrapped >= rank) throw InvalidArgument(fmt::format("{}: axis {} of a rank-{} tensor", op, axis, rank));
  return wrapped;
}

// Views of x, each a Var. They share one pass-through node whose gradient buffer (x's shape, zeroed
// when the first piece's gradient arrives) each piece adds its gradient into, at its own view; the
// node then hands the whole buffer to x once. view(t, i) gives piece i of a tensor of x's shape.
std::vector<Var> pieces(const Var& x, int64_t count, const std::function<Tensor(const Tensor&, int64_t)>& view,
                        const char* op) {
  Var whole = make_var(x.value(), {x}, op, [x = x.node()](const Tensor& dy) { accumulate_grad(*x, dy); });
  std::vector<Var> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out.push_back(make_var(view(x.value(), i), {whole}, op, [whole = whole.node(), view, i](const Tensor& dy) {
      // The buffer is this node's own (never another node's gradient), so adding in place is safe.
      if (!whole->grad.defined()) whole->grad = Tensor::zeros(whole->value.shape(), dy.dtype(), dy.device());
      Tensor slot = view(whole->grad, i);
      ops::binary_(KESTREL_BINARY_ADD, slot, slot, dy);
    }));
  return out;
}

}  // namespace

std::vector<Var> unbind(const Var& x, int axis) {
  const int a = wrap_axis(axis, x.value().rank(), "unbind");
  return pieces(x, x.value().size(a), [a](const Tensor& t, int64_t i) { return t.select(a, i); }, "unbind");
}

std::vector<Var> chunk(const Var& x, int axis, int count) {
  const int a = wrap_axis(axis, x.value().rank(), "chunk");
  const int64_t extent = x.value().size(a);
  if (count < 1 || extent % count != 0)
    throw InvalidArgument(fmt::format("chunk: {} parts of an axis of {}", count, extent));
  const int64_t size = extent / count;
  return pieces(x, count, [a, size](const Tensor& t, int64_t i) { return t.slice(a, i * size, (i + 1) * size); }, "chunk");
}

Var select(const Var& x, int axis, int64_t index) {
  const int a = wrap_axis(axis, x.value().rank(), "select");
  if (index < 0 || index >= x.value().size(a))
    throw InvalidArgument(fmt::format("select: index {} of an axis of {}", index, x.value().size(a)));
  return pieces(x, 1, [a, index](const Tensor& t, int64_t) { return t.select(a, index); }, "select")[0];
}

Var slice(const Var& x, int axis, int64_t start, int64_t end) {
  const int a = wrap_axis(axis, x.value().rank(), "slice");
  if (start < 0 || start > end || end > x.value().size(a))
    throw InvalidArgument(fmt::format("slice: [{}, {}) of an axis of {}", start, end, x.value().size(a)));
  return pieces(x, 1, [a, start, end](const Tensor& t, int64_t) { return t.slice(a, start, end); }, "slice")[0];
}

Var concat(const std::vector<Var>& parts_in, int axis) {
  if (parts_in.empty()) throw InvalidArgument("concat: no parts");
  DType dtype = parts_in[0].value().dtype();  // parts of two dtypes meet in the wider
  for (const Var& part : parts_in) dtype = promoted_dtype(dtype, part.value().dtype());
  std::vector<Var> parts;
  for (const Var& part : parts_in) parts.push_back(cast(part, dtype));
  const int a = wrap_axis(axis, parts[0].value().rank(), "concat");
  Shape shape = parts[0].value().shape();
  shape[a] = 0;
  for (const Var& part : parts) {
    Shape other = part.value().shape();
    if (other.size() != shape.size())
      throw InvalidArgument(fmt::format("concat: parts {} and {}", parts[0].value().describe(), part.value().describe()));
    shape[a] += other[a];
    other[a] = shape[a];
    if (other != shape)
      throw InvalidArgument(fmt::format("concat: parts {} and {} differ off axis {}", parts[0].value().describe(),
                                        part.value().describe(), a));
  }
  Tensor y = Tensor::empty(shape, parts[0].value().dtype(), parts[0].value().device());
  std::vector<std::shared_ptr<VarNode>> nodes;
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (const Var& part : parts) {
    const int64_t extent = part.value().size(a);
    Tensor slot = y.slice(a, start, start + extent);
    ops::copy_(slot, part.value());
    nodes.push_back(part.node());
    starts.push_back(start);
    start += extent;
  }
  return make_var(y, parts, "concat", [nodes, starts, a](const Tensor& dy) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i]->requires_grad)
        accumulate_grad(*nodes[i], dy.slice(a, starts[i], starts[i] + nodes[i]->value.size(a)).contiguous());
  });
}

Var stack(const std::vector<Var>& parts, int axis) {
  if (parts.empty()) throw InvalidArgument("stack: no parts");
  const int a = wrap_axis(axis, parts[0].value().rank() + 1, "stack");
  std::vector<Var> widened;
  widened.reserve(parts.size());
  for (const Var& part : parts) {
    Shape shape = part.value().shape();
    shape.insert(shape.begin() + a, 1);
    widened.push_back(reshape(part, shape));
  }
  return concat(widened, a);
}

Var mean_over(const Var& x_in, int axis) {
  const Var x = widened(x_in);
  const int a = wrap_axis(axis, x.value().rank(), "mean_over");
  return make_var(math::mean(x.value(), {a}, false), {x}, "mean_over", [x = x.node(), a](const Tensor& dy) {
    const double n = static_cast<double>(x->value.size(a));
    accumulate_grad(*x, math::scale(dy.unsqueeze(a), 1.0 / n).expand(x->value.shape()).contiguous());
  });
}

}  // namespace kestrel::fn
