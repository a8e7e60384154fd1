#!/usr/bin/env bash
# Exports every shipped model kind with `kestrel export` and checks the files with ONNX's own checker and
# onnxruntime against Kestrel's predictions (onnx and onnxruntime from PyPI, installed into BUILD/pyenv
# when missing). Exits 77 (ctest: skipped, with the reason printed) only when PyPI cannot be reached.
#   check_onnx_export.sh BUILD SOURCE PYTHON   (PYTHON: the interpreter the kestrel module was built for)
set -euo pipefail
build=$1 source=$2 python=$3
env=$build/pyenv
if ! "$env/bin/python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  [ -x "$env/bin/python" ] || "$python" -m venv "$env"
  if ! "$env/bin/pip" install --quiet --disable-pip-version-check onnx onnxruntime numpy; then
    echo "SKIPPED: could not install onnx and onnxruntime from PyPI into $env (no network?)"
    exit 77
  fi
fi
PYTHONPATH=$build/python KESTREL_CLI=$build/bin/kestrel KESTREL_SOURCE_DIR=$source \
  "$env/bin/python" "$source/tests/integration/check_onnx_export.py"
