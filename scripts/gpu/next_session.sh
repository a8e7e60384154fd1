#!/usr/bin/env bash
# The open issues' pending GPU checks in priority order, each under its own time limit, in one device
# call of at most 600 s (a lent machine gives a session 15 minutes, its start included):
#   bash scripts/gpu/next_session.sh            # carry gpu-bundle and .gl (scripts/gpu/gl_packages.sh)
#   bash scripts/gpu/next_session.sh more       # the second list, in a second call while the machine is warm
# The log goes to $OUT/log.txt, so what ran comes back even when the call runs out of time.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${OUT:-/tmp}/log.txt
rm -rf /tmp/kb && tar xzf gpu-bundle/kb.tgz -C /tmp || { echo "cannot extract gpu-bundle/kb.tgz" | tee -a "$log"; exit 1; }
export KESTREL_BUNDLE_EXTRACTED=1
step() {
  local limit=$1 name=$2
  timeout -k 10 "$limit" bash scripts/gpu/on_device.sh "$name" 2>&1 | tee -a "$log"
  echo "=== $name ended with ${PIPESTATUS[0]} ($(date +%T))" | tee -a "$log"
}
if [ "${1:-}" = more ]; then
  step 90 memplan        # issue 16: the memory planner's predictions against CUDA's measured peaks (a record)
  export ONLY=mlp; step 150 floor; unset ONLY  # issue 18: the MLP floors with fewer launches a step (gradients in place, fused activation gradients)
  step 70 lt             # issue 18: cuBLASLt against cuBLAS, the MLPs and GPT-2
  step 170 vulkan_quick  # issue 18: Vulkan on NVIDIA against CUDA (carry .gl/)
  step 40 vulkan_profile # issue 18: the Vulkan MLP steps' shaders, replays included, against their batches' spans
  exit 0
fi
step 130 conformance   # new since bbaec3c: column folds ending inside a pack, Adam in packs, ABI 1.14 (RELU/GELU_BACKWARD, GEMM row sums by BGRADB, CE backward from losses), ABI 1.15 (recurrent_layer through cuDNN), ABI 1.16 (layer_norm backward+add), ABI 1.17 (reduce sum_squares)
step 75 cudnn_rnn      # issue 15: cuDNN's whole layers against the fused cells: layers, steps, 300 training steps each way
step 30 gemm_cublas    # the gemm and fused families without cuBLASLt (row sums by a reduction)
step 45 kernels        # issues 15/16: bias-gradient folds, GPT-2's loss and Adam, packed and generic; layer norm by warps and by blocks, adding into the residual's gradient or not; clipping's one-pass squared norm
step 90 mlp16          # issues 15/16: MLP and GPT-2 bf16 steps (gradients in place, fused activation gradients, packed Adam), PyTorch eager beside
step 130 torch_best    # issues 15/16: PyTorch compile-reduce-overhead against the same steps in the same call
step 55 profile_gpt2   # issue 15: what is left of GPT-2's step outside its products
