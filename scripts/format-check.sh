#!/usr/bin/env bash
# Every C++ and CUDA file git tracks, checked against the repository's
# .clang-format (CONTRIBUTING.md). Exit 1 naming each file that differs;
# `scripts/format-check.sh --fix` rewrites them in place instead.
# Needs clang-format-19 (scripts/setup.sh installs it; the tree is
# formatted with it: other versions differ).
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
[ "${1:-}" = --fix ] && fix=1
format=$(command -v clang-format-19 || command -v clang-format || true)
[ -n "$format" ] ||
  { echo "format-check.sh: clang-format is missing (apt-get install clang-format-19)"; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ $fix -eq 1 ]; then
  "$format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$format" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'format-check.sh: not clang-formatted: %s\n' "${bad[@]}"
  echo "format-check.sh: run scripts/format-check.sh --fix"
  exit 1
fi
echo "format-check.sh: ${#files[@]} files formatted"
