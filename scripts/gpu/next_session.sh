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
  step 300 precision   # issue 16: accuracy on CUDA under torch.autocast's rule (MLP 3 seeds, ConvNet, gpt_char)
  step 170 vulkan_quick  # issue 18: Vulkan on NVIDIA against CUDA (carry .gl/); unchanged since the 2026-11-27 H200 run
  exit 0
fi
step 130 conformance   # new since c7620a2, none run yet: activations after cuBLASLt's bias, column folds and CE rows in packs, logits in padded rows
step 25 kernels        # issues 15/16: the bias-gradient folds and GPT-2's loss, rewritten without a GPU, both ways
step 70 lt             # issue 18: cuBLASLt against cuBLAS with the ReLU outside the epilogue (the MLPs), GPT-2 both ways
step 90 mlp16          # issues 15/16: MLP and GPT-2 bf16 steps, PyTorch eager beside them in the same lease
step 55 profile_gpt2   # issue 15: GPT-2's two strided logits copies a step should be gone (padded_rows.h)
step 40 vulkan_profile # issue 18: the Vulkan MLP steps' shader times against their wall time
step 130 floor         # issue 18: the floors again, now that floor.py counts cuBLAS's nvjet kernels as products
