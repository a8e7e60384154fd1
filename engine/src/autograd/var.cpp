#include <fmt/format.h>

#include <string>
#include <unordered_set>

#include "kestrel/autograd.h"
#include "kestrel/ops.h"

namespace kestrel {

namespace {
thread_local bool grad_mode = true;
thread_local bool anomaly = false;
thread_local const char* current_layer = nullptr;

std::string where(const char* layer) { return layer ? fmt::format(" in {}", layer) : std::string(); }
}  // namespace

bool grad_enabled() { return grad_mode; }
bool anomaly_mode() { return anomaly; }
AnomalyModeGuard::AnomalyModeGuard() : previous_(anomaly) { anomaly = true; }
AnomalyModeGuard::~AnomalyModeGuard() { anomaly = previous_; }
LayerScope::LayerScope(const char* layer) : previous_(current_layer) { current_layer = layer; }
LayerScope::~LayerScope() { current_layer = previous_; }
NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(grad_mode) { grad_mode = true; }
EnableGradGuard::~EnableGradGuard() { grad_mode = previous_; }

VarNode::~VarNode() {
  // Releasing the parents one by one would recurse once per node of the chain behind them. Instead the
  // nodes this one held the last reference to are unlinked here, their parents taken into a list first
  // (then their backward closures, whose captures the list still holds, can go without recursing).
  std::vector<std::shared_ptr<VarNode>> pending = std::move(parents);
  backward = nullptr;
  while (!pending.empty()) {
    std::shared_ptr<VarNode> node = std::move(pending.back());
    pending.pop_back();
    if (node.use_count() != 1) continue;  // someone else still holds it
    for (auto& parent : node->parents) pending.push_back(std::move(parent));
    node->parents.clear();
    node->backward = nullptr;
  }  // each node dies here with no parents left to release
}

Var::Var(Tensor value, bool requires_grad) : node_(std::make_shared<VarNode>()) {
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
}

void GradBuffer::add_rows(const Tensor& index, const Tensor& src) {
  Tensor grad = Tensor::zeros(storage_.shape(), src.dtype(), src.device());  // (V, D)
  ops::scatter_add_(grad, 0, index, src);
  add(grad);
}

void Var::set_grad_buffer(std::shared_ptr<GradBuffer> buffer) {
  const Tensor& storage = buffer->storage();
  if (storage.shape() != node_->value.shape() || storage.dtype() != node_->value.dtype())
    throw InvalidArgument(fmt::format("gradient buffer {} does not match {}", storage.describe(), node_->value.describe()));
  node_->grad = storage;
  node_->grad_buffer = std::move(buffer);
}

Var make_var(Tensor value, std::vector<Var> parents, const char* op, BackwardFn backward) {
  if (anomaly && !ops::all_finite(value)) {
    // An op's inputs made by other ops were checked when made; the others come from outside the tape.
    for (size_t i = 0; i < parents.size(); ++i)
      if (!ops::all_finite(parents[i].value()))
        throw AnomalyError(fmt::format("forward: input {} of {}{} holds NaN or infinity ({}); it was made outside "
                                       "the model's ops: check the data",
                                       i, op, where(current_layer), parents[i].value().describe()));
    throw AnomalyError(fmt::format("forward: {}{} gave NaN or infinity ({}) from finite inputs", op,
                                   where(current_layer), value.describe()));
  }
  Var out(std::move(value));
  out.node_->layer = current_layer;
  bool any = false;
  for (const Var& p : parents) any = any || p.requires_grad();
  if (!any || !grad_mode) return out;
  out.node_->requires_grad = true;
  out.node_->op = op;
  out.node_->backward = std::move(backward);
  for (const Var& p : parents) out.node_->parents.push_back(p.node());
  return out;
}

void accumulate_grad(VarNode& node, const Tensor& grad) {
  if (!node.requires_grad) return;
  if (grad.shape() != node.value.shape())
    throw InvalidArgument(fmt::format("internal: gradient {} for {} ({})", grad.describe(), node.value.describe(), node.op));
  if (node.grad_buffer) {
    node.grad_buffer->add(grad);
    return;
  }
  const Tensor cast = grad.dtype() == node.value.dtype() ? grad : grad.to(node.value.dtype());
  if (!node.grad.defined())
    node.grad = cast;  // may be shared with another parent's gradient: never updated in place
  else
    node.grad = ops::binary(KESTREL_BINARY_ADD, node.grad, cast);
}

Tensor gradient_so_far(const VarNode& node) {
  if (!node.requires_grad || node.grad_buffer || !node.grad.defined() || node.grad.dtype() != node.value.dtype())
    return {};
  return node.grad;
}

void replace_grad(VarNode& node, const Tensor& total) {
  if (total.shape() != node.value.shape() || total.dtype() != node.value.dtype())
    throw InvalidArgument(fmt::format("internal: gradient {} for {} ({})", total.describe(), node.value.describe(), node.op));
  node.grad = total;
}

GradDestination grad_destination(VarNode& leaf, DType dtype) {
  if (leaf.requires_grad && leaf.grad_buffer && dtype == leaf.value.dtype())
    if (Tensor storage = leaf.grad_buffer->overwritable(); storage.defined()) return {storage, true};
  return {Tensor::empty(leaf.value.shape(), dtype, leaf.value.device()), false};
}

void land_grad(VarNode& leaf, const GradDestination& written) {
  if (written.in_place)
    leaf.grad_buffer->overwritten();
  else
    accumulate_grad(leaf, written.tensor);
}

void accumulate_broadcast_grad(VarNode& node, const Tensor& grad) {
  if (!node.requires_grad) return;
  const Shape& target = node.value.shape();
  if (grad.shape() == target) return accumulate_grad(node, grad);
  // Sum over leading dims that broadcasting added, and over dims where the operand had extent 1.
  std::vector<int> dims;
  size_t lead = grad.rank() - target.size();
  for (size_t d = 0; d < static_cast<size_t>(grad.rank()); ++d)
    if (d < lead || (target[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(static_cast<int>(d));
  Tensor reduced = dims.empty() ? grad : ops::reduce(KESTREL_REDUCE_SUM, grad, dims, true);
  accumulate_grad(node, reduced.reshape(target));
}

namespace {
// After `node`'s backward: the gradients it gave its inputs (for a parameter, the whole accumulated
// gradient, which was finite before this contribution, or the check would have stopped earlier).
void check_gradients(const VarNode& node) {
  for (size_t i = 0; i < node.parents.size(); ++i) {
    const VarNode& parent = *node.parents[i];
    if (!parent.requires_grad) continue;
    const Tensor& grad = parent.grad_buffer ? parent.grad_buffer->storage() : parent.grad;
    if (grad.defined() && !ops::all_finite(grad))
      throw AnomalyError(fmt::format("backward: {}{} gave NaN or infinity as the gradient of its input {} ({}); the "
                                     "gradient it received was finite",
                                     node.op, where(node.layer), i, grad.describe()));
  }
}
}  // namespace

namespace {
thread_local LeafGradientObserver* leaf_observer = nullptr;
thread_local int backward_depth = 0;  // nested passes (checkpointed segments) are not reported
}  // namespace

LeafGradientScope::LeafGradientScope(LeafGradientObserver& observer) : previous_(leaf_observer) {
  leaf_observer = &observer;
}
LeafGradientScope::~LeafGradientScope() { leaf_observer = previous_; }

void backward(const Var& root, const Tensor& seed) {
  if (!root.requires_grad())
    throw InvalidArgument("backward: the value does not require a gradient (no parameter took part, or grad mode was off)");
  Tensor initial = seed;
  if (!initial.defined()) {
    if (root.value().numel() != 1)
      throw InvalidArgument(fmt::format("backward: {} is not a scalar; pass a seed gradient", root.value().describe()));
    initial = Tensor::full(root.value().shape(), 1.0, root.value().dtype(), root.value().device());
  }
  // Reverse topological order by an iterative depth-first search (graphs can be deep).
  std::vector<VarNode*> order;
  std::unordered_set<VarNode*> visited;
  std::vector<std::pair<VarNode*, size_t>> stack{{root.node().get(), 0}};
  visited.insert(root.node().get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->parents.size()) {
      VarNode* parent = node->parents[next++].get();
      if (parent->requires_grad && visited.insert(parent).second) stack.push_back({parent, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  ++backward_depth;
  struct Leave {
    ~Leave() { --backward_depth; }
  } leave;
  LeafGradientObserver* observer = backward_depth == 1 ? leaf_observer : nullptr;
  accumulate_grad(*root.node(), initial);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VarNode* node = *it;
    if (!node->backward && node->grad_buffer && observer) observer->completed(*node);
    if (!node->backward || !node->grad.defined()) continue;
    Tensor grad = node->grad;
    node->grad = Tensor();  // intermediate gradients are not kept
    node->backward(grad);
    if (anomaly) check_gradients(*node);
  }
}

}  // namespace kestrel
