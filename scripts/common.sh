# Shared by quickstart.sh and test.sh: install missing Debian packages, then configure and build.
set -euo pipefail

KESTREL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KESTREL_BUILD=${KESTREL_BUILD:-$KESTREL_ROOT/build}
KESTREL_JOBS=${KESTREL_JOBS:-$(nproc 2>/dev/null || echo 2)}

# Everything the build, the tests and the default training run need, as Debian 12 packages.
KESTREL_PACKAGES=(
  build-essential cmake pkg-config python3 python3-jsonschema python3-venv
  libtrilinos-kokkos-dev libopenblas-dev libopenblas-openmp-dev
  libboost-dev nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libgtest-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  pybind11-dev python3-dev python3-numpy python3-pytest
  libvulkan-dev glslc mesa-vulkan-drivers
  dataset-fashion-mnist fortunes
)

kestrel_install_packages() {
  local missing=()
  for package in "${KESTREL_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "kestrel: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The cuDNN frontend (header-only C++) for the CUDA plugin's fused attention: the headers of PyPI's
# nvidia-cudnn-frontend wheel, unpacked into the build folder once per version, where a CUDA toolkit is
# installed. Without them (no network, say) the plugin builds without cuDNN's attention and runs its own
# kernels; a failed fetch is not retried for that version until the marker is removed.
KESTREL_CUDNN_FRONTEND_VERSION=1.32.0
kestrel_fetch_cudnn_frontend() {
  local dest="$KESTREL_BUILD/cudnn-frontend" version=$KESTREL_CUDNN_FRONTEND_VERSION
  [ "$(cat "$dest/version" 2>/dev/null)" = "$version" ] && return 0
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  local failed="$KESTREL_BUILD/cudnn-frontend-$version.failed"
  if [ -e "$failed" ]; then
    echo "kestrel: building without cuDNN's fused attention (fetching nvidia-cudnn-frontend $version failed before;" \
         "remove $failed to try again)"
    return 0
  fi
  local tools="$KESTREL_BUILD/tools-venv" unpacked="$KESTREL_BUILD/cudnn-frontend.partial"
  rm -rf "$unpacked"
  if python3 -m venv "$tools" &&
     "$tools/bin/pip" download --quiet --timeout 20 --retries 1 --no-deps --only-binary=:all: \
       -d "$unpacked/wheel" "nvidia-cudnn-frontend==$version" &&
     python3 - "$unpacked" <<'PY'
import pathlib, sys, zipfile
dest = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(next((dest / "wheel").glob("*.whl"))) as wheel:
    wheel.extractall(dest, [name for name in wheel.namelist() if name.startswith("include/")])
PY
  then
    rm -rf "$unpacked/wheel" "$dest"
    echo "$version" > "$unpacked/version"
    mv "$unpacked" "$dest"  # complete or absent, never half there
  else
    rm -rf "$unpacked"
    touch "$failed"
    echo "kestrel: could not fetch nvidia-cudnn-frontend $version from PyPI: the CUDA plugin is built without" \
         "cuDNN's fused attention"
  fi
}

kestrel_build() {
  mkdir -p "$KESTREL_BUILD"
  kestrel_fetch_cudnn_frontend
  # numpy and pytest come from Debian's packages above, so the Python module and its test are built for
  # Debian's interpreter rather than one a version manager (pyenv) puts first on PATH without them.
  local python=()
  [ -x /usr/bin/python3 ] && python=(-DPython3_EXECUTABLE=/usr/bin/python3)
  cmake -S "$KESTREL_ROOT" -B "$KESTREL_BUILD" -DCMAKE_BUILD_TYPE=Release "${python[@]}" "$@"
  cmake --build "$KESTREL_BUILD" -j "$KESTREL_JOBS"
}
