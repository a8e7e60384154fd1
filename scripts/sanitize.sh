#!/usr/bin/env bash
# The engine, the CPU plugin and the tests built with sanitizers, and the tests that exercise them run:
#   bash scripts/sanitize.sh            # AddressSanitizer + UndefinedBehaviorSanitizer, build-asan/
#   bash scripts/sanitize.sh thread     # ThreadSanitizer on the engine's threads (the loader's, the trainer's), build-tsan/
# No CUDA, Vulkan or benchmarks (their drivers are not built with the sanitizers). Which tests run, and
# why, is in SANITIZED_TESTS below; extra arguments go to ctest.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kestrel_install_packages

mode=${1:-address}
[ $# -gt 0 ] && shift
case "$mode" in
  address)
    build="$KESTREL_ROOT/build-asan"
    sanitizers="address,undefined"
    # Unit tests (IO, data, autograd, plugin faults, the ABI), the CPU conformance suite, training and
    # exact resume, mixed precision, capture/replay, the model and config readers' error paths, plots, and
    # the fuzz corpora.
    SANITIZED_TESTS='^(test_(io|data|loader|tensor|gradcheck|plugin_abi|plugin_faults|philox_half|training|training_faults|training_text|text|recurrent|transformer|activation_checkpointing|anomaly|capture|cli_models|config|mixed_precision|plot)|conformance|fuzz_corpus_.*)$'
    # intercept_tls_get_addr=0: GCC 12's sanitizer runtime (like GCC <= 13 and LLVM <= 16) takes a
    # dynamic TLS block (of a library loaded with dlopen: the plugins and what they bring in) whose
    # address happens to sit at a certain offset in its page for a pre-2.25 glibc header and reads
    # garbage as its bounds; LeakSanitizer's tracer then crashes at exit ("Tracer caught signal 11")
    # after every test passed, now and then and more under load (seen here with ctest -j2 beside
    # fuzzers). Mudlet/Mudlet#9809 and #9930 trace the mechanism.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  thread)
    build="$KESTREL_ROOT/build-tsan"
    sanitizers="thread"
    # The threads: the loader's workers (and the trainer's, the engine's own).
    SANITIZED_TESTS='^(test_loader|test_training|conformance)$'
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    # The CPU plugin's loops and OpenBLAS run on OpenMP's threads, which hand results back through
    # barriers in libgomp, uninstrumented code: TSan cannot see that ordering and reports the loops'
    # writes as racing with whoever reads them next. One OpenMP thread (and one OpenBLAS thread) leaves
    # TSan checking Kestrel's own threads.
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
    ;;
  *) echo "usage: bash scripts/sanitize.sh [address|thread] [ctest arguments]" >&2; exit 2 ;;
esac

# -O1 -g1: the sanitizers' checks (UBSan's most) make -O2 -g builds slow, and this one ran half of CI: -O1
# halves the compile time, and line tables are all a report's stack needs. The CPU plugin keeps -O2
# (plugins/cpu/CMakeLists.txt): the conformance suite's large cases run through its kernels.
cmake -S "$KESTREL_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DKESTREL_SANITIZE="$sanitizers" -DKESTREL_WITH_CUDA=OFF -DKESTREL_WITH_VULKAN=OFF -DKESTREL_BUILD_BENCH=OFF \
  -DKESTREL_PYTHON=OFF
# Only what the selected tests run (their programs, the CPU plugin, the CLI and the fault plugins): the
# other test programs would only add compile time. A test's program is named after it, except these two
# kinds; a test of another kind makes the build stop with "no rule to make target", not skip it.
targets=$(cd "$build" && ctest -N -R "$SANITIZED_TESTS" | sed -n 's/^ *Test *#[0-9]*: //p' | while read -r name; do
  case "$name" in
    conformance) echo conformance_test ;;
    fuzz_corpus_*) echo "fuzz_${name#fuzz_corpus_}_replay" ;;
    *) echo "$name" ;;
  esac
done)
cmake --build "$build" -j "$KESTREL_JOBS" --target kestrel_cpu kestrel_cli kestrel_fault_plugins $targets
cd "$build"
# OpenMPI keeps memory after MPI_Finalize in components it has unloaded by then, so LeakSanitizer can
# neither attribute nor suppress it (Debian's libraries have no frame pointers for the fast unwinder).
# The conformance suite's collective family therefore runs in a second pass, on two ranks under mpirun,
# with every check but leaks; the first pass leaves it out.
GTEST_FILTER=${GTEST_FILTER:--*collective*} ctest --output-on-failure -j "$KESTREL_JOBS" -R "$SANITIZED_TESTS" "$@"
if [ "$mode" = address ] && [ $# -eq 0 ] && ctest -N -R '^conformance_collectives_np2$' | grep -q 'Total Tests: 1'; then
  ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} ctest --output-on-failure -R '^conformance_collectives_np2$'
fi
