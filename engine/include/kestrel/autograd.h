// Reverse-mode automatic differentiation. A Var is a tensor that remembers how it was computed; calling
// backward(loss) walks that record in reverse and accumulates dloss/dx into every Var that requires a
// gradient. Backward rules live next to their forward (see functional.h) and are written in the
// plugin primitives, so every backend differentiates the same way.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "kestrel/tensor.h"

namespace kestrel {

struct VarNode;
using BackwardFn = std::function<void(const Tensor& grad_output)>;

// Storage of its own for a leaf's gradient (a model keeps all of them in one flat buffer). Backward hands
// every contribution to it, and its owner decides whether one adds to the stored gradient or replaces an
// old one: the zeroing rule lives with the owner (Model::zero_grad), not in autograd.
class GradBuffer {
 public:
  explicit GradBuffer(Tensor storage) : storage_(std::move(storage)) {}
  virtual ~GradBuffer() = default;
  const Tensor& storage() const { return storage_; }
  virtual void add(const Tensor& grad) = 0;  // grad: the leaf's shape, any float dtype (cast as it lands)
  // Adds a @ b, a: (M, K), b: (K, N), M * N = the leaf's size: a weight gradient as one GEMM, straight
  // into the storage. With row_sums ((M), the storage's dtype) the same GEMM also writes a's rows summed
  // over K there (ops::gemm_with_row_sums_): the bias gradient of a linear layer.
  virtual void add_product(const Tensor& a, const Tensor& b, Tensor* row_sums = nullptr) = 0;
  // Adds src's rows at the rows `index` names (storage.scatter_add_(0, index, src)), index and src: (count, D)
  // of a (V, D) leaf: an embedding's gradient. By default through a zeroed temporary and add().
  virtual void add_rows(const Tensor& index, const Tensor& src);
  // The storage when the next contribution may simply replace what it holds (nothing added since the
  // owner's last lazy zero), for an op to write the whole gradient into; undefined otherwise. Call
  // overwritten() once the op has written it.
  virtual Tensor overwritable() { return {}; }
  virtual void overwritten() {}

 protected:
  Tensor storage_;
};

struct VarNode {
  Tensor value;
  Tensor grad;  // dloss/dvalue once accumulated; for a leaf with a grad_buffer, that buffer's storage
  std::shared_ptr<GradBuffer> grad_buffer;  // where a leaf's gradient accumulates, if it has storage
  bool requires_grad = false;
  std::vector<std::shared_ptr<VarNode>> parents;
  BackwardFn backward;  // given dloss/dvalue, accumulates into the parents; empty for leaves
  const char* op = "leaf";
  const char* layer = nullptr;  // the layer whose forward made it (LayerScope), for anomaly reports

  VarNode() = default;
  VarNode(const VarNode&) = delete;
  VarNode& operator=(const VarNode&) = delete;
  ~VarNode();  // iterative: a tape as deep as a model is long must not use a stack frame per node
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);
  const Tensor& value() const { return node_->value; }
  const Tensor& grad() const { return node_->grad; }
  bool requires_grad() const { return node_ && node_->requires_grad; }
  bool defined() const { return node_ != nullptr; }
  const std::shared_ptr<VarNode>& node() const { return node_; }
  // Sends this leaf's gradients to `buffer`, whose storage has the value's shape and dtype.
  void set_grad_buffer(std::shared_ptr<GradBuffer> buffer);

 private:
  friend Var make_var(Tensor, std::vector<Var>, const char*, BackwardFn);
  std::shared_ptr<VarNode> node_;
};

// The result of an op: requires a gradient when any parent does (and grad mode is on).
Var make_var(Tensor value, std::vector<Var> parents, const char* op, BackwardFn backward);

// Adds `grad` (already in the parent's shape) into the node's gradient. A gradient of another float
// dtype (a 16-bit one of an f32 leaf under autocast) is cast where it lands: into a parameter's stored
// gradient, that is one copy.
void accumulate_grad(VarNode& node, const Tensor& grad);

// The gradient accumulated into `node` so far, for an op that adds its own contribution to it in the same
// pass (a layer norm's backward, ABI 1.16): a tensor in the node's shape and dtype, which the op must not
// write (it may be another node's gradient too); undefined where there is none yet or a leaf's storage
// holds it (accumulate_grad then). replace_grad makes the op's sum the node's gradient.
Tensor gradient_so_far(const VarNode& node);
void replace_grad(VarNode& node, const Tensor& total);

// Where an op that makes a leaf's whole gradient in `dtype` (a fused layer's weight and bias gradients,
// a bias gradient's reduction) writes it: the leaf's gradient storage itself when nothing is there to
// add to and the dtype is the storage's, so that no temporary and copy follow; else a new tensor of the
// leaf's shape. Hand it to land_grad once the op has run.
struct GradDestination {
  Tensor tensor;  // the leaf's shape
  bool in_place = false;
};
GradDestination grad_destination(VarNode& leaf, DType dtype);
void land_grad(VarNode& leaf, const GradDestination& written);
// Adds a broadcast gradient into `node`, first summing over the dims that broadcasting expanded.
void accumulate_broadcast_grad(VarNode& node, const Tensor& grad);

// dloss/dx for every x that requires a gradient; `root` is usually a scalar loss (seeded with 1), or
// pass `seed` for a non-scalar root. Intermediate gradients are released as soon as they are used.
void backward(const Var& root, const Tensor& seed = {});

// Told during backward when a leaf's gradient is complete for the pass: every op that used the leaf has
// given its contribution (backward runs in reverse topological order, so a leaf's turn comes after all of
// its users'). Data-parallel training sends gradients while backward goes on (DDP's hooks). Only the
// outermost backward reports: a checkpointed segment's inner pass is not the last word on a leaf that is
// also used outside the segment.
class LeafGradientObserver {
 public:
  virtual ~LeafGradientObserver() = default;
  virtual void completed(const VarNode& leaf) = 0;
};
// Installs `observer` for backward passes on this thread while in scope.
class LeafGradientScope {
 public:
  explicit LeafGradientScope(LeafGradientObserver& observer);
  ~LeafGradientScope();
  LeafGradientScope(const LeafGradientScope&) = delete;
  LeafGradientScope& operator=(const LeafGradientScope&) = delete;

 private:
  LeafGradientObserver* previous_;
};

// Turns graph recording off in a scope (evaluation, optimizer steps), like torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
// Turns it back on in a scope, like torch.enable_grad(): backward re-records a checkpointed segment
// (fn::checkpoint) even when it was called without recording.
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_enabled();

// Anomaly detection, like torch.autograd.detect_anomaly: while on, the output of every op in forward
// and every gradient an op's backward gives its inputs are checked for NaN and infinity (a device read
// per op: for finding a bug, not for training), and the first is thrown as AnomalyError naming the op,
// the layer (LayerScope) and the pass.
class AnomalyModeGuard {
 public:
  AnomalyModeGuard();
  ~AnomalyModeGuard();
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;

 private:
  bool previous_;
};
bool anomaly_mode();

// Names the layer whose forward runs in this scope (e.g. "/layers/3 (linear)"; the text must outlive
// the graph): ops record it, so an anomaly in forward or backward says where in the model it arose.
class LayerScope {
 public:
  explicit LayerScope(const char* layer);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  const char* previous_;
};

}  // namespace kestrel
