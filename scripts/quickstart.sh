#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build, and run Kestrel on the
# best available backend.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kestrel_install_packages
kestrel_build
"$KESTREL_BUILD/bin/kestrel" devices
"$KESTREL_BUILD/bin/kestrel" train "$KESTREL_ROOT/models/fashion_mlp.train.json" "$@"
