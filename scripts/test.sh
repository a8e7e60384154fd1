#!/usr/bin/env bash
# Builds everything and runs the whole test suite (unit, conformance on every loaded backend,
# integration, benchmark smoke runs). Extra arguments go to ctest, e.g. -R conformance.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kestrel_install_packages
kestrel_build
cd "$KESTREL_BUILD"
ctest --output-on-failure -j "$KESTREL_JOBS" "$@"
