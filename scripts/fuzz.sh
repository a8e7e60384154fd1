#!/usr/bin/env bash
# Fuzzes the readers for longer than the tests do: builds the libFuzzer binaries of tests/fuzz with
# clang, AddressSanitizer and UndefinedBehaviorSanitizer into build-fuzz/, then runs each target for
# SECONDS (default 60) from its kept corpus (tests/fuzz/corpus/<target>/, plus the shipped models for the
# JSON readers). New interesting inputs collect in build-fuzz/corpus/<target>/. A finding stops the run
# and leaves its input as build-fuzz/crash-*: fix the cause, then keep the input (minimised with
# `build-fuzz/bin/fuzz_<target> -minimize_crash=1 crash-...`) in tests/fuzz/corpus/<target>/.
#   bash scripts/fuzz.sh [model_file|run_config|checkpoint_state|safetensors|data_files|plugin_table|all] [SECONDS]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KESTREL_PACKAGES+=(clang)
kestrel_install_packages

targets=${1:-all}
seconds=${2:-60}
[ "$targets" = all ] && targets="model_file run_config checkpoint_state safetensors data_files plugin_table"
build="$KESTREL_ROOT/build-fuzz"
CC=clang CXX=clang++ cmake -S "$KESTREL_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKESTREL_SANITIZE=address,undefined -DKESTREL_FUZZ=ON -DKESTREL_WITH_CUDA=OFF -DKESTREL_WITH_VULKAN=OFF \
  -DKESTREL_BUILD_BENCH=OFF
for target in $targets; do cmake --build "$build" -j "$KESTREL_JOBS" --target "fuzz_$target"; done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
for target in $targets; do
  mkdir -p "corpus/$target"
  seeds=("$KESTREL_ROOT/tests/fuzz/corpus/$target")
  case "$target" in model_file|run_config) seeds+=("$KESTREL_ROOT/models") ;; esac
  echo "== fuzz_$target for ${seconds}s"
  "bin/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    "corpus/$target" "${seeds[@]}" 2>&1 | tee "fuzz_$target.log" | grep -E "^(#[0-9]+ +DONE|==|SUMMARY|stat::)|escaped" || true
  if ls crash-* leak-* timeout-* oom-* >/dev/null 2>&1; then echo "fuzz_$target: finding kept in $build" >&2; exit 1; fi
done
