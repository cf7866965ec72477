#!/usr/bin/env bash
# Installs what is missing, builds build/, then runs the checkpoint demo: a training-like state
# saved lazily, verified, and read back with h5dump. Arguments go to the demo binary.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rtft_setup

demo="${RTFT_BUILD_DIR}/bin/rtft-demo-ckpt"
if [[ ! -x "${demo}" ]]; then
  cat >&2 <<MSG
error: ${demo} does not exist.
The checkpoint demo binary is not built yet: the checkpoint engine (issue 2) is still being
written. The foundation builds and its tests run with scripts/test.sh.
MSG
  exit 1
fi
rtft_log "running ${demo} $*"
exec "${demo}" "$@"
