#!/usr/bin/env bash
# Downloads the Vulkan loader and the GL vendor-neutral libraries (Debian's .debs) into .gl/, which the lent
# GPU machine lacks and NVIDIA's Vulkan driver needs; carry .gl with gpu-bundle, and on_device.sh unpacks them
# (gl_libraries) before the Vulkan steps. Once per working tree: .gl/ is ignored by git.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gl /tmp/amd64/partial
options=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
apt-get "${options[@]}" update -qq
(cd .gl && apt-get "${options[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
ls .gl
