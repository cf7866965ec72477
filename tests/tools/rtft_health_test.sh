#!/usr/bin/env bash
# rtft-health end to end: its verdict line, its exit codes, its fault point and its refusals.
# Without a GPU (CI) the device check says it was skipped and the host check runs; on the GPU
# machine the GEMM must be exact and the line must carry its rates.
set -uo pipefail
health=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$health" --device 0) || fail "a healthy machine: exit $? ($out)"
echo "$out"
grep -q '"healthy":true' <<<"$out" || fail "no healthy verdict: $out"
grep -q '"host_gb_per_s":[0-9]' <<<"$out" || fail "no host rate: $out"
if grep -q '"gpu":"skipped' <<<"$out"; then
  echo "no GPU here: the device check was skipped"
else
  grep -q '"gemm_exact":true' <<<"$out" || fail "the GEMM was not checked exact: $out"
  grep -q '"d2h_gb_per_s":[0-9]' <<<"$out" || fail "no copy rate: $out"
fi

# Passive (a slot whose rank holds the device): no GEMM and no copy, whatever the machine.
out=$("$health" --device 0 --passive) || fail "passive: exit $? ($out)"
grep -q '"gpu":"skipped: passive' <<<"$out" || fail "passive ran the device check: $out"
if grep -q 'gemm\|d2h' <<<"$out"; then fail "passive measured the device: $out"; fi
grep -q '"host_gb_per_s":[0-9]' <<<"$out" || fail "passive: no host rate: $out"

# The host alone.
out=$("$health" --device -1) || fail "host only: exit $?"
grep -q '"device":-1' <<<"$out" || fail "host only: $out"

# A floor nobody meets: unhealthy, exit 1, the reason in the line.
out=$("$health" --device -1 --min-host-gbs 1e9)
rc=$?
[[ $rc == 1 ]] || fail "an unmet floor: exit $rc ($out)"
grep -q '"healthy":false' <<<"$out" || fail "an unmet floor: $out"
grep -q 'host memory copy at' <<<"$out" || fail "no reason: $out"

# The test hook fails the check before it measures anything.
RTFT_FAULT="health.check:exit=1" RTFT_FAULT_LOG=/dev/null "$health" --device 0 > /dev/null
rc=$?
[[ $rc == 1 ]] || fail "the fault point: exit $rc"

# Bad options: usage, exit 2.
for bad in "--device -2" "--gemm-n 8" "--copy-mb 0" "--min-d2h-gbs -1" "--no-such-flag"; do
  # shellcheck disable=SC2086
  "$health" $bad > /dev/null 2>&1
  rc=$?
  [[ $rc != 0 && $rc != 1 ]] || fail "$bad: exit $rc"
done
echo PASS
