#!/usr/bin/env bash
# Checks that every tracked C/C++/CUDA source is formatted by clang-format (.clang-format at the
# repository root). CI runs it from scripts/test.sh; a difference fails the run.
#
#   scripts/check-format.sh          check, print the offending lines, exit 1 on any difference
#   scripts/check-format.sh --fix    reformat the same files in place
#
# CLANG_FORMAT selects the binary (default: clang-format). Untracked files are not checked.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
clang_format="${CLANG_FORMAT:-clang-format}"
command -v "${clang_format}" >/dev/null || {
  echo "error: ${clang_format} not found (apt-get install clang-format)" >&2
  exit 1
}

dirs=(src include launcher bench sim tests examples)
files=()
if git -C "${root}" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    [[ -f "${f}" ]] && files+=("${f}")  # skip tracked files deleted in the work tree
  done < <(git ls-files -z -- "${dirs[@]/%//*.h}" "${dirs[@]/%//*.cc}" "${dirs[@]/%//*.cu}" "${dirs[@]/%//*.c}")
else
  # Not a git checkout (e.g. an unpacked archive): check what is there.
  existing=()
  for d in "${dirs[@]}"; do [[ -d "${d}" ]] && existing+=("${d}"); done
  if ((${#existing[@]} > 0)); then
    while IFS= read -r -d '' f; do files+=("${f}"); done < <(
      find "${existing[@]}" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.c' \) -print0)
  fi
fi

if [[ "${1:-}" == "--fix" ]]; then
  ((${#files[@]} == 0)) || "${clang_format}" -i "${files[@]}"
  echo "clang-format: reformatted ${#files[@]} files"
  exit 0
fi
[[ $# -eq 0 ]] || {
  echo "usage: $0 [--fix]" >&2
  exit 2
}

if ((${#files[@]} > 0)) && ! "${clang_format}" --dry-run -Werror "${files[@]}"; then
  echo "error: the files above are not clang-formatted; run scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "clang-format: ${#files[@]} files clean ($("${clang_format}" --version))"
