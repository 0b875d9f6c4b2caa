#!/usr/bin/env bash
# Installs what mimo needs on Debian 12 (apt), configures and builds it into
# build/. Safe to run again: installs only what is missing, rebuilds only what
# changed. Usage: scripts/setup.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."

# MLIR 19 pinned: the -22 packages conflict with it and would replace it.
# python3-torch and python3-numpy: the PyTorch twin test (tests/e2e/twin.py);
# python3-pil, python3-sentencepiece, python3-regex and python3-jinja2
# (--template hf): tools/mimo-prep and its test.
packages=(
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
  libopenblas-dev ninja-build cmake g++ python3 ccache clang-format-19
  python3-numpy python3-torch python3-pil python3-sentencepiece python3-regex
  python3-jinja2
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
    --no-install-recommends "${missing[@]}"
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir -DMIMO_REQUIRE_ALL_TESTS=ON \
  "${launcher[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
