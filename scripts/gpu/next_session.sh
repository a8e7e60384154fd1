#!/usr/bin/env bash
# The open issues' pending GPU checks in priority order, each under its own time limit, in one device
# call of at most 600 s (a lent machine gives a session 15 minutes, its start included):
#   bash scripts/gpu/next_session.sh            # carry gpu-bundle and .gl (scripts/gpu/gl_packages.sh)
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
step 130 conformance   # ABI 1.11-1.13: MAX_ABS, 16-bit cross-entropy and its backward, attention on (N,H,T,D) views (cuDNN and own kernels); packed element-wise kernels; stride-0 gather/scatter
step 60 lossscale      # issue 16: the one-read overflow check and the scaler's share of the MLP's f16 step
step 90 lt             # issue 18: products through cuBLASLt (opt-in): conformance, then the MLPs and GPT-2 both ways
step 30 packed         # issues 15/16: packed element-wise kernels against the strided ones (the MLP's bf16 step)
step 40 rnn            # issue 15: cuDNN's RNN API against Kestrel's fused-cell layers, side by side
step 15 deadline       # issue 17: a peer that never joins fails the first collective at the timeout
step 55 profile        # issue 16: where the MLP's bf16 step goes now that products keep 16-bit results
step 55 profile_gpt2   # issue 15: where GPT-2 small's bf16 step goes (11% MFU)
step 75 vulkan_quick   # issue 18: Vulkan on NVIDIA against CUDA, the pool backward's gather (carry .gl/)
