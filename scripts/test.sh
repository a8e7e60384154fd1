#!/usr/bin/env bash
# Builds everything and runs the whole test suite (unit, conformance on every loaded backend,
# integration, benchmark smoke runs). Extra arguments go to ctest, e.g. -R conformance.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The srun test's one-node Slurm cluster (tests/integration/check_srun.sh): Debian's daemons, started by
# the test alone, on ports and files of its own.
KESTREL_PACKAGES+=(slurmd slurmctld slurm-client munge)
kestrel_install_packages
kestrel_build
cd "$KESTREL_BUILD"
# The packages above bring lavapipe: the Vulkan conformance runs must find a device, not pass vacuously.
export KESTREL_EXPECT_DEVICES=${KESTREL_EXPECT_DEVICES-cpu,vulkan}
ctest --output-on-failure -j "$KESTREL_JOBS" "$@"
