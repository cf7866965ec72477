#!/usr/bin/env bash
# No source file of the library (src/) over 400 lines (docs/architecture.md, "How the code is
# kept"): a file that grows past it is split along a seam of its own, never trimmed to fit. CI
# runs it from scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
limit=400
bad=""
while IFS= read -r f; do
  n=$(wc -l < "${f}")
  if ((n > limit)); then bad+="  ${f}: ${n} lines"$'\n'; fi
done < <(git ls-files -- 'src/*.h' 'src/*.cc' 'src/*.cu' 'src/*.cuh')
if [[ -n "${bad}" ]]; then
  echo "error: source files of src/ over ${limit} lines (split them along a seam):" >&2
  printf '%s' "${bad}" >&2
  exit 1
fi
echo "file sizes: every file of src/ has ${limit} lines or fewer"
