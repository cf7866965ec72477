#!/usr/bin/env bash
# The checkpoint tour (scripts/demo.sh runs the hot-swap demo). Installs what is missing, builds
# build/, then runs the checkpoint demo: a training-like state
# saved lazily, restored into a fresh process state and replayed to the same bits, verified with
# rtft-ckpt, and read back with h5dump. Arguments go to example-01-checkpoint (try --help).
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rtft_setup

bin="${RTFT_BUILD_DIR}/bin"
dir="${RTFT_DEMO_DIR:-/var/tmp/rtft-demo}"

rtft_log "1/4 training with lazy checkpoints, then restore + replay (example-01-checkpoint --dir ${dir} $*)"
"${bin}/example-01-checkpoint" --dir "${dir}" "$@"

rtft_log "2/4 the versions on disk (rtft-ckpt ls)"
"${bin}/rtft-ckpt" ls "${dir}"

rtft_log "3/4 every checksum of the newest version (rtft-ckpt verify)"
"${bin}/rtft-ckpt" verify "${dir}"

latest="$(cat "${dir}/LATEST")"
file="$(printf '%s/v%012d/rank-00000.h5' "${dir}" "${latest}")"
rtft_log "4/4 the file read back by h5dump, which knows nothing of rt-ft: ${file}"
header="$(h5dump -H "${file}")"
sed -n '1,40p' <<<"${header}"
echo "    ... ($(wc -l <<<"${header}") lines of header in all)"
h5dump -d /tensors/layer0/weights -s 0 -c 8 -d /objects/step "${file}"
rtft_log "demo finished: the restored run matched the uninterrupted one bit for bit"
