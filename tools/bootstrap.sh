#!/usr/bin/env bash
# Installs what flowrun needs on Debian 12, then configures and builds it in ./build.
# Idempotent: a second run only rebuilds what changed. Used by the README's quick start and CI.
# --test also installs what tools/test.sh needs beyond that: clang and its sanitizer and
# libFuzzer runtimes (fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake meson ninja-build pkg-config       # toolchain
  libyaml-cpp-dev libcli11-dev                  # config, command line
  zlib1g-dev                                    # checkpoint checksums (CRC-32)
  libonnx-dev libprotobuf-dev protobuf-compiler # ONNX import
  libopenmpi-dev openmpi-bin                    # ranks and CPU collectives
  libdnnl-dev ocl-icd-opencl-dev                # CPU GEMM (oneDNN; its CMake config looks for OpenCL)
  libgtest-dev                                  # tests
)
[ "${1:-}" = "--test" ] && packages+=(clang libclang-rt-14-dev libomp-dev)  # fuzz targets (clang, its OpenMP), sanitizers
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA backend builds wherever nvcc is (the CUDA toolkit's usual place counts too): CUDA's
# libraries are needed only when a run asks for parallel.device: cuda (ops/cuda/backend.h).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
if [ ! -f build/build.ninja ]; then
  if command -v nvcc >/dev/null; then
    meson setup build -Dcuda=enabled
  else
    echo "bootstrap: no nvcc (the CUDA toolkit): building flowrun without its CUDA backend"
    meson setup build -Dcuda=disabled
  fi
fi
ninja -C build
