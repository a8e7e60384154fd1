#!/usr/bin/env bash
# The installed package as a user meets it: `cmake --install` into a fresh prefix outside the build
# tree, then with no Kestrel variables in the environment a project of its own finds it with
# find_package(Kestrel CONFIG) and trains a model with the installed engine and plugins, a program built
# with pkg-config lists the devices, and the installed tool runs.
#   bash tests/install/check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset KESTREL_PLUGIN_PATH KESTREL_BACKEND LD_LIBRARY_PATH
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for installed in bin/kestrel lib/libkestrel.so lib/kestrel/plugins/libkestrel_cpu.so include/kestrel/trainer.h \
                 lib/cmake/Kestrel/KestrelConfig.cmake lib/pkgconfig/kestrel.pc share/kestrel/models/fashion_mlp.json; do
  [ -e "$prefix/$installed" ] || { echo "not installed: $installed"; exit 1; }
done

cmake -S "$source/examples/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
"$work/consumer/train_in_app" "$prefix/share/kestrel/models/fashion_mlp.train.json" "$work/run"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
c++ -std=c++20 "$source/examples/devices.cpp" $(pkg-config --cflags --libs kestrel) -o "$work/devices"
"$work/devices" | tee "$work/devices.txt"
grep -q '^cpu:0 ' "$work/devices.txt"

"$prefix/bin/kestrel" devices | grep -q 'cpu'
"$prefix/bin/kestrel" check "$prefix/share/kestrel/models/gpt_char.json" > /dev/null
echo "installed package: find_package, pkg-config and the tool work from $prefix"
