#!/usr/bin/env bash
# Builds the control-plane decoder's libFuzzer target with clang (ASan + UBSan) in its own build
# directory and runs it for a while. CI runs it through the `fuzz` ctest (30 s).
#
#   scripts/fuzz.sh                 build and fuzz for RTFT_FUZZ_SECONDS (default 30)
#
# Environment:
#   RTFT_FUZZ_BUILD_DIR   build directory (default: <repo>/build-fuzz)
#   RTFT_FUZZ_SECONDS     fuzzing time (default 30)
#   CXX_FUZZ              the compiler (default: clang++)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RTFT_FUZZ_BUILD_DIR:-${root}/build-fuzz}"
seconds="${RTFT_FUZZ_SECONDS:-30}"
cxx="${CXX_FUZZ:-clang++}"

command -v "${cxx}" >/dev/null ||
  { echo "error: ${cxx} not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
  cmake -S "${root}/tests/control/fuzz" -B "${build}" "${generator[@]}" \
    -DCMAKE_CXX_COMPILER="${cxx}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "${build}" --target control_decode_fuzzer -j "${RTFT_JOBS:-2}"
corpus="${build}/corpus"
mkdir -p "${corpus}"
echo "==> fuzzing the control-plane decoder for ${seconds} s (corpus ${corpus})" >&2
exec "${build}/control_decode_fuzzer" -max_total_time="${seconds}" -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 "${corpus}"
