#!/usr/bin/env bash
# Trains a short run and reads its TensorBoard events back with TensorBoard's own reader (PyPI
# `tensorboard`, installed into BUILD/pyenv when missing), a resumed run included. Exits 77 (ctest: skipped,
# with the reason printed) only when PyPI cannot be reached.
#   check_tensorboard.sh BUILD SOURCE PYTHON   (PYTHON: the interpreter for BUILD/pyenv)
set -euo pipefail
build=$1 source=$2 python=$3
env=$build/pyenv
if ! "$env/bin/python" -c "import tensorboard" 2>/dev/null; then
  [ -x "$env/bin/python" ] || "$python" -m venv "$env"
  if ! "$env/bin/pip" install --quiet --disable-pip-version-check tensorboard; then
    echo "SKIPPED: could not install tensorboard from PyPI into $env (no network?)"
    exit 77
  fi
fi
run=$(mktemp -d)/run
trap 'rm -rf "$(dirname "$run")"' EXIT
config=$source/models/fashion_mlp.train.json
"$build/bin/kestrel" train "$config" --train-subset 2000 --test-subset 500 --epochs 2 --out "$run" --quiet
"$env/bin/python" "$source/tests/integration/check_tensorboard.py" "$run"
# Resumed from its checkpoint for a third epoch: a second event file whose session start makes TensorBoard
# drop nothing that metrics.jsonl keeps.
"$build/bin/kestrel" train "$config" --train-subset 2000 --test-subset 500 --epochs 3 --out "$run" --resume --quiet
"$env/bin/python" "$source/tests/integration/check_tensorboard.py" "$run"
