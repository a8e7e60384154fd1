#!/usr/bin/env bash
# The open issues' pending GPU checks in priority order, each under its own time limit, in one device
# call of at most 600 s (a lent machine gives a session 15 minutes, its start included):
#   bash scripts/gpu/next_session.sh            # carry gpu-bundle and .gl (see on_device.sh)
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
step 130 conformance   # first CUDA runs: attention dropout and key padding, pool scatter, window bounds, cuDNN SDPA
step 60 mlp16          # issue 16: the MLP's bf16 step with 16-bit activations, PyTorch eager beside it
step 100 sdpa          # issue 15: cuDNN's attention against the plugin's kernels, conformance and GPT-2's step
step 90 wgrad          # issue 18: the ConvNet's weight gradient, cuDNN against one cuBLAS product
step 60 floor          # issue 18: each CUDA step against its products and Adam's bytes
step 140 vulkan_quick  # issue 18: Vulkan on NVIDIA against CUDA
