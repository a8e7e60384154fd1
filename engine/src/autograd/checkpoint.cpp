// Activation checkpointing: a segment's forward without a tape, and its backward as a second, recorded
// forward followed by a backward pass over that run alone.
#include "kestrel/functional.h"

namespace kestrel::fn {

Var checkpoint(const CheckpointBody& body, const std::vector<Var>& inputs, const std::vector<Var>& params) {
  Tensor out;
  {
    NoGradGuard no_tape;  // the segment's intermediate tensors die as soon as the next op has read them
    out = body(inputs, false).value();
  }
  std::vector<Var> parents = inputs;
  parents.insert(parents.end(), params.begin(), params.end());
  // The output node holds its parents, so the inputs' nodes outlive this closure's use of them.
  std::vector<VarNode*> input_nodes;
  for (const Var& input : inputs) input_nodes.push_back(input.node().get());
  return make_var(out, parents, "checkpoint", [body, input_nodes](const Tensor& grad_out) {
    EnableGradGuard tape;
    std::vector<Var> fresh;  // leaves of the second run, standing for the inputs
    for (VarNode* node : input_nodes) fresh.emplace_back(node->value, node->requires_grad);
    Var again = body(fresh, true);
    if (!again.requires_grad()) return;
    backward(again, grad_out);  // parameters' gradients land in their buffers
    for (size_t i = 0; i < fresh.size(); ++i)
      if (fresh[i].requires_grad() && fresh[i].grad().defined()) accumulate_grad(*input_nodes[i], fresh[i].grad());
  });
}

}  // namespace kestrel::fn
