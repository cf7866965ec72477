#!/usr/bin/env bash
# The main job: a data-parallel training run (rtft-train: ZeRO-1 AdamW, 4 ranks on Gloo) loses a
# whole slot in the middle of a step, a warm spare takes its rank, fed from its neighbours'
# snapshots, and the run ends bitwise identical to the same run without a failure. Installs what
# is missing and builds first (scripts/common.sh). Prints a timeline of the recovery and both
# final digests; exits 0 only when they are equal. The checkpoint tour is scripts/demo-checkpoint.sh.
#
# Environment: RTFT_DEMO_STEPS (60), RTFT_DEMO_KILL_STEP (25), RTFT_DEMO_DIR (a new directory
# under /tmp), and those of scripts/common.sh.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rtft_setup

bin="${RTFT_BUILD_DIR}/bin"
steps="${RTFT_DEMO_STEPS:-60}"
kill_step="${RTFT_DEMO_KILL_STEP:-25}"
[[ "${steps}" =~ ^[0-9]+$ && "${kill_step}" =~ ^[0-9]+$ ]] ||
  rtft_die "RTFT_DEMO_STEPS and RTFT_DEMO_KILL_STEP must be whole numbers"
((kill_step >= 1 && kill_step + 1 < steps)) || rtft_die "RTFT_DEMO_KILL_STEP must be in 1..steps-2"
command -v mpirun >/dev/null || rtft_die "mpirun not found (apt-get install openmpi-bin)"
dir="${RTFT_DEMO_DIR:-$(mktemp -d /tmp/rtft-demo-XXXXXX)}"
mkdir -p "${dir}"

if ((EUID == 0)); then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
mpirun_args=(mpirun --bind-to none --oversubscribe --enable-recovery)
dp_args=(--heartbeat-ms 100 --heartbeat-timeout-ms 1000)
train=("${bin}/rtft-train" --steps "${steps}" --log-every 10)

now() { date +%s.%N; }

# The dp-launch of `slot` in this demo's job (the job's processes carry RTFT_DEMO_JOB).
agent_of() {
  local slot="$1" pid
  for pid in $(pgrep -x dp-launch || true); do
    tr '\0' '\n' <"/proc/${pid}/environ" 2>/dev/null | grep -qx "RTFT_DEMO_JOB=${dir}" || continue
    tr '\0' '\n' <"/proc/${pid}/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=${slot}" &&
      echo "${pid}" && return 0
  done
  return 1
}

rtft_log "1/3 the run with a failure: 4 ranks + 1 warm spare; rank 2's slot (agent and application)"
rtft_log "    is SIGKILLed while rank 2 is in the middle of step ${kill_step}"
fault_log="${dir}/faults.log"
rm -f "${fault_log}"
RTFT_DEMO_JOB="${dir}" RTFT_FAULT_LOG="${fault_log}" \
  "${mpirun_args[@]}" -np 5 "${bin}/dp-launch" --spares 1 "${dp_args[@]}" -- \
  "${train[@]}" --fault "2:protect.update@$((kill_step + 1)):hang" >"${dir}/failure.out" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  [[ -s "${fault_log}" ]] && break
  kill -0 "${job}" 2>/dev/null || break
  sleep 0.1
done
[[ -s "${fault_log}" ]] || { cat "${dir}/failure.out"; rtft_die "rank 2 never reached step ${kill_step}"; }
slot="$(grep -o 'slot=[0-9]*' "${fault_log}" | head -1 | cut -d= -f2)"
agent="$(agent_of "${slot}")" || rtft_die "the dp-launch of slot ${slot} was not found"
killed_at="$(now)"
kill -KILL "${agent}"
wait "${job}" || true

rtft_log "2/3 the same run without a failure: 4 ranks"
"${mpirun_args[@]}" -np 4 "${bin}/dp-launch" "${dp_args[@]}" -- "${train[@]}" \
  >"${dir}/reference.out" 2>&1 || true

rtft_log "3/3 timeline of the failure run (seconds after the SIGKILL)"
python3 - "${dir}/failure.out" "${killed_at}" "${kill_step}" <<'PY'
import re, sys
out, killed, kill_step = open(sys.argv[1]).read(), float(sys.argv[2]), int(sys.argv[3])
def first(pattern):
    m = re.search(pattern + r".* t=([0-9.]+)", out)
    return (m, float(m.group(m.lastindex)) - killed) if m else (None, None)
rows = []
m, t = first(r"\[train \d+\] (failure) step=(\d+)")
if m: rows.append((t, f"failure detected by a survivor's collective (step {m.group(2)})"))
m, t = first(r"\[train \d+\] event epoch=(\d+) failed=(\d+)")
if m: rows.append((t, f"failure event: epoch {m.group(1)}, {m.group(2)} failed rank(s), spare assigned"))
m, t = first(r"\[train (\d+)\] start role=spare-activated rank=(\d+)")
if m: rows.append((t, f"spare activated as rank {m.group(2)}"))
recs = re.findall(r"\[train (\d+)\] recovered epoch=(\d+) step=(\d+) .*fed=(\d+) bytes=(\d+) .*transfer_s=([0-9.]+) .* t=([0-9.]+)", out)
if recs:
    step = int(recs[0][2])
    moved = sum(int(r[4]) for r in recs)
    rows.append((max(float(r[6]) for r in recs) - killed,
                 f"state transferred ({moved} bytes to {recs[0][3]} rank(s)); every rank restored step {step}"))
    rows.append((max(float(r[6]) for r in recs) - killed, f"training resumed at step {step} (rollback step)"))
    print(f"    steps executed again: {max(0, kill_step - step)} (failure during step {kill_step}, resumed at {step})")
for t, what in sorted(rows):
    print(f"    {t:+8.3f} s  {what}")
PY

digest() { grep -o 'digest=[0-9a-f]*' "$1" | sort -u; }
with_failure="$(digest "${dir}/failure.out")"
without="$(digest "${dir}/reference.out")"
echo "    final digest with the failure:    ${with_failure:-none}"
echo "    final digest without a failure:   ${without:-none}"
if [[ -n "${with_failure}" && "${with_failure}" == "${without}" && "$(wc -l <<<"${with_failure}")" == 1 ]]; then
  rtft_log "demo finished: a slot was lost and replaced, and the run ended bitwise identical (logs in ${dir})"
  exit 0
fi
rtft_log "the digests differ or are missing: see ${dir}/failure.out and ${dir}/reference.out"
exit 1
