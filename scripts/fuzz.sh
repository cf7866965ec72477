#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) in its own build directory and runs it for a
# while. CI runs each through its `fuzz` ctest (30 s).
#
#   scripts/fuzz.sh [control|checkpoint]   build and fuzz for RTFT_FUZZ_SECONDS (default 30)
#
#   control     the control-plane decoder (tests/control/fuzz)
#   checkpoint  the checkpoint reader (tests/checkpoint/fuzz), seeded with files that
#               example-01-checkpoint writes when RTFT_FUZZ_DEMO names it
#
# Environment:
#   RTFT_FUZZ_BUILD_DIR   build directory (default: <repo>/build-fuzz, or build-fuzz-checkpoint)
#   RTFT_FUZZ_SECONDS     fuzzing time (default 30)
#   RTFT_FUZZ_DEMO        example-01-checkpoint, to write real checkpoints as seeds (checkpoint only)
#   CXX_FUZZ              the compiler (default: clang++)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
what="${1:-control}"
case "${what}" in
  control)
    source_dir="${root}/tests/control/fuzz"
    target=control_decode_fuzzer
    max_len=4096
    default_build="${root}/build-fuzz"
    ;;
  checkpoint)
    source_dir="${root}/tests/checkpoint/fuzz"
    target=checkpoint_reader_fuzzer
    max_len=65536
    default_build="${root}/build-fuzz-checkpoint"
    ;;
  *)
    echo "usage: scripts/fuzz.sh [control|checkpoint]" >&2
    exit 2
    ;;
esac
build="${RTFT_FUZZ_BUILD_DIR:-${default_build}}"
seconds="${RTFT_FUZZ_SECONDS:-30}"
cxx="${CXX_FUZZ:-clang++}"

command -v "${cxx}" >/dev/null ||
  { echo "error: ${cxx} not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
  cmake -S "${source_dir}" -B "${build}" "${generator[@]}" \
    -DCMAKE_CXX_COMPILER="${cxx}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "${build}" --target "${target}" -j "${RTFT_JOBS:-2}"
corpus="${build}/corpus"
mkdir -p "${corpus}"
if [[ "${what}" == checkpoint && -x "${RTFT_FUZZ_DEMO:-}" ]]; then
  # Real files written by the engine: two versions of a small training state, several chunks
  # per tensor. The fuzzer turns them into seed recipes at start.
  seeds="${build}/seed-checkpoints"
  rm -rf "${seeds}"
  RTFT_CKPT_POOL_BYTES=4M RTFT_CKPT_CHUNK_BYTES=16K "${RTFT_FUZZ_DEMO}" --dir "${seeds}" \
    --layers 2 --params-per-layer 6000 --steps 4 --every 2 >/dev/null
  export RTFT_FUZZ_SEED_DIR="${seeds}"
fi
echo "==> fuzzing ${target} for ${seconds} s (corpus ${corpus})" >&2
exec "${build}/${target}" -max_total_time="${seconds}" -rss_limit_mb=2048 \
  -max_len="${max_len}" -timeout=10 -print_final_stats=1 "${corpus}"
