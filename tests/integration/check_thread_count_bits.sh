#!/usr/bin/env bash
# The CPU backend's results do not depend on its thread count: a few training steps of the LSTM, the
# GPT-style model and the ConvNet at KESTREL_CPU_THREADS=1 and =3 (the OpenMP threads' pieces, the GEMMs'
# column halves, the vector math's staged blocks, the fused convolution's images and weight-gradient
# groups) must write byte-identical checkpoints.
#   check_thread_count_bits.sh KESTREL SOURCE
set -euo pipefail
kestrel=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for model in lstm_generator gpt_char fashion_convnet; do
  for threads in 1 3; do
    KESTREL_CPU_THREADS=$threads "$kestrel" train "$source/models/$model.train.json" \
      --backend cpu --max-steps 2 --train-subset 512 --test-subset 64 --out "$work/$model-$threads" --quiet >/dev/null
  done
  one=$(ls "$work/$model-1/checkpoints/"*.safetensors) three=$(ls "$work/$model-3/checkpoints/"*.safetensors)
  if ! cmp "$one" "$three"; then
    echo "FAILED: $model's weights after 2 steps differ between 1 and 3 CPU threads"
    exit 1
  fi
  echo "$model: the same weights at 1 and 3 threads"
done
