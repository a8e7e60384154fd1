#!/usr/bin/env bash
# Packs the build for a GPU machine that has the NVIDIA driver and CUDA but no package access (the
# team's lent H100/H200): programs, plugins, the fault plugins the tests load, CTest's files, the
# libraries they need (through ../shared/gpu/bundle), Fashion-MNIST and the fortunes corpus, into
# gpu-bundle/kb.tgz. On that machine, from the repository root: bash scripts/gpu/next_session.sh (the
# pending checks in priority order), or bash scripts/gpu/on_device.sh [ctest|conformance|sdpa|collectives|
# memcheck|accuracy|speedup|speedup_cuda|precision|mfu|profile|exitcrash|recurrent|convnet|wgrad|floor|
# cpustep|rnn|cudnn_rnn|memplan|packed|kernels|deadline|vulkan|vulkan_quick]...
set -euo pipefail
cd "$(dirname "$0")/../.."
bundler=${KESTREL_GPU_BUNDLER:-../shared/gpu/bundle}
stage=$(mktemp -d)/kb
"$bundler" "$stage" build/bin build/lib
mkdir -p "$stage/build/tests/plugins"
cp -r build/tests/plugins/fault_plugins build/tests/plugins/vanishing build/tests/plugins/exit_teardown "$stage/build/tests/plugins/"
(cd build && find . -name CTestTestfile.cmake -exec cp --parents {} "$stage/build/" \;)
cp -r /usr/share/datasets/fashion-mnist "$stage/"
cp -r /usr/share/games/fortunes "$stage/"  # the text corpus of the sequence models
mkdir -p gpu-bundle
tar czf gpu-bundle/kb.tgz -C "$(dirname "$stage")" kb
rm -rf "$(dirname "$stage")"
du -h gpu-bundle/kb.tgz
