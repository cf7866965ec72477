#!/usr/bin/env bash
# The build switches (RTFT_WITH_CUDA, _NCCL, _GLOO, _URING) are 0 or 1 in the generated
# core/build_config.h: code tests them with #if. #ifdef / #ifndef / defined() would be true for a
# switch that is off, so this check fails on any of them. CI runs it from scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
bad="$(git ls-files -- '*.h' '*.cc' '*.cu' '*.h.in' | xargs grep -nE '#[[:space:]]*ifn?def[[:space:]]+RTFT_WITH_|defined[[:space:]]*\(?[[:space:]]*RTFT_WITH_' || true)"
if [[ -n "${bad}" ]]; then
  echo "error: test the build switches with #if, not #ifdef/#ifndef/defined():" >&2
  echo "${bad}" >&2
  exit 1
fi
echo "config macros: every RTFT_WITH_* is tested with #if"
