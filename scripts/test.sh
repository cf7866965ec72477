#!/usr/bin/env bash
# Installs what is missing (Debian 12, apt-get), configures and builds build/, checks the
# formatting, then runs the tests with ctest. Safe to run again: each step skips what is done.
#
#   scripts/test.sh                 everything (gpu tests skip themselves without a GPU)
#   scripts/test.sh -R checkpoint   extra arguments go to ctest
#
# Environment (besides those of scripts/common.sh):
#   RTFT_TEST_LABELS          ctest -L regex: run only tests with a matching label (unit|mpi)
#   RTFT_TEST_EXCLUDE_LABELS  ctest -LE regex: skip tests with a matching label (e.g. slow)
#   RTFT_TEST_JOBS            tests run at once (default 3: most wait on processes, heartbeats
#                             and timeouts; at 2 the two cores were 136 % busy)
#   RTFT_SKIP_FORMAT=1        skip the clang-format check
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rtft_setup

if [[ "${RTFT_SKIP_FORMAT:-0}" == 1 ]]; then
  rtft_log "RTFT_SKIP_FORMAT=1: clang-format check skipped"
else
  rtft_log "checking formatting"
  "${RTFT_ROOT}/scripts/check-format.sh"
fi
"${RTFT_ROOT}/scripts/check-config-macros.sh"
"${RTFT_ROOT}/scripts/check-file-sizes.sh"

# Open MPI refuses to start as root unless told; CI runs as root on two cores, so multi-process
# tests also need to oversubscribe.
if ((EUID == 0)); then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"

ctest_args=(--test-dir "${RTFT_BUILD_DIR}" --output-on-failure --no-tests=error
  -j "${RTFT_TEST_JOBS:-3}" --timeout 600)
[[ -z "${RTFT_TEST_LABELS:-}" ]] || ctest_args+=(-L "${RTFT_TEST_LABELS}")
[[ -z "${RTFT_TEST_EXCLUDE_LABELS:-}" ]] || ctest_args+=(-LE "${RTFT_TEST_EXCLUDE_LABELS}")
rtft_log "ctest ${ctest_args[*]} $*"
ctest "${ctest_args[@]}" "$@"
