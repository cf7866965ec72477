#!/usr/bin/env bash
# The Slurm batch scripts of scripts/slurm/ against a real slurmctld and four slurmd ("nodes"
# n1..n4 of one machine) that tests/slurm/local_cluster.sh starts on localhost.
#
#   slurm_test.sh REPO_ROOT DP_LAUNCH TEST_APP [TRAINER]
#
# Always: a plain job proves the cluster (3 nodes allocated with --no-kill, a task killed under
# srun --kill-on-bad-exit=0 leaves the others running). When DP_LAUNCH and TEST_APP exist: the
# mpirun and the srun variant each run 2 active slots + 1 spare, one slot is killed, and the job
# still exits 0 with a spare in its place; srun without --kill-on-bad-exit=0 is warned about.
# When TRAINER (examples/train's rtft-train) exists: it runs under srun with a node crash and
# ends with the digest of a run without one, and again with --coordinator-slot dedicated (slot 0,
# on the batch host, runs only the coordinator) through the crash of rank 0's node.
# Exit 77 (skipped) when not root or when Slurm cannot be started here.
set -u
repo=$1
dp_launch=$2
test_app=$3
trainer=${4:-}

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# shellcheck source=tests/slurm/local_cluster.sh
source "$repo/tests/slurm/local_cluster.sh"

if ((EUID != 0)); then
  echo "SKIP: the slurm test starts slurmd, which needs root"
  exit 77
fi
tmp=$(mktemp -d "${RTFT_TEST_TMPDIR:-/var/tmp}/rtft-slurm-test-XXXXXX")
chmod 755 "$tmp"  # munged wants its socket's path searchable by all
finish() {
  rtft_cluster_stop
  if ((failures)); then rtft_cluster_logs; fi
  if [[ "${RTFT_TEST_KEEP:-0}" == 1 ]]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

start=$SECONDS
nodes=4
# A cluster whose nodes do not come up (a daemon that lost its port, say) is stopped and started
# again, in a fresh directory, twice at most before the test fails: never skipped for that.
for attempt in 1 2 3; do
  rtft_cluster_start "$tmp/cluster-$attempt" "$nodes"
  rc=$?
  ((rc == 1 && attempt < 3)) || break
  echo "[cluster] attempt $attempt did not start: stopping it and trying again"
  rtft_cluster_stop
done
if ((rc == 77)); then
  echo "SKIP: Slurm cannot run here (see above)"
  exit 77
elif ((rc != 0)); then
  echo "FAIL: the local Slurm cluster did not start"
  failures=1
  exit 1
fi
jobs_dir=$tmp/cluster-$attempt/jobs
cd "$jobs_dir" || exit 1
# The job inherits this environment (sbatch --export=ALL): Open MPI refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run_job NAME LIMIT_S SBATCH_ARGS... : submits, waits for the end (polling scontrol, faster
# than sbatch --wait's back-off), sets job_rc to the job's exit code and job_out to its output.
job_rc=-1
job_out=""
run_job() {
  local name=$1 limit=$2 id state line deadline
  shift 2
  job_out=$jobs_dir/$name.out
  id=$(sbatch --parsable --job-name="$name" --output="$job_out" --time=5 "$@") || {
    fail "$name: sbatch $* refused the job"
    job_rc=-1
    return 1
  }
  deadline=$((SECONDS + limit))
  while :; do
    line=$(scontrol -o show job "$id" 2>/dev/null)
    state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<<"$line")
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) break ;;
    esac
    if ((SECONDS > deadline)); then
      fail "$name: job $id still ${state:-unknown} after ${limit} s; cancelled"
      scancel "$id"
      sleep 1
      break
    fi
    sleep 0.3
  done
  # ExitCode=RC:SIGNAL of the batch script.
  job_rc=$(sed -n 's/.* ExitCode=\([0-9]*\):\([0-9]*\).*/\1/p' <<<"$line")
  job_rc=${job_rc:--1}
  echo "--- job $name ($id): $state, exit code $job_rc, $(wc -l <"$job_out" 2>/dev/null || echo 0) lines"
}

# expect_out PATTERN WHAT: the last job's output matches the extended regular expression.
expect_out() {
  if ! grep -Eq -- "$1" "$job_out" 2>/dev/null; then
    fail "$2: output lacks /$1/"
    return 1
  fi
}
# After a job's checks: its output, when any of them (or the job) failed.
show_out_if_failed() {
  if ((failures > failures_shown)); then
    sed 's/^/    | /' "$job_out" 2>/dev/null
    failures_shown=$failures
  fi
}
failures_shown=0

# 1. The cluster itself: three nodes, --no-kill, and a task killed under
#    srun --kill-on-bad-exit=0 leaves the other two running to the end.
cat >"$jobs_dir/plain.sh" <<'EOF'
#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --no-kill
echo "nodes=$SLURM_JOB_NODELIST nnodes=$SLURM_NNODES"
srun --kill-on-bad-exit=0 bash -c '
  echo "task $SLURM_PROCID on $SLURMD_NODENAME"
  if [ "$SLURM_PROCID" = 1 ]; then kill -KILL $$; fi
  sleep 1
  echo "task $SLURM_PROCID done"'
echo "srun exit $?"
exit 0
EOF
run_job plain 60 "$jobs_dir/plain.sh"
if ((job_rc != 0)); then fail "plain job exited $job_rc"; fi
expect_out '^nodes=n\[1-3\] nnodes=3' "plain job"
expect_out '^task 0 done' "plain job (task 0 survives)"
expect_out '^task 2 done' "plain job (task 2 survives)"
expect_out 'task 1: Killed' "plain job (srun reports the killed task)"
show_out_if_failed

# 2. A node crash (slurmd, slurmstepd and the task of n3 SIGKILLed) in an allocation made with
#    --no-kill: Slurm marks n3 down, the job and its step go on with n1 and n2 to the end.
cat >"$jobs_dir/nodefail.sh" <<'EOF'
#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --no-kill
srun --kill-on-bad-exit=0 --no-kill bash -c '
  echo "task $SLURM_PROCID on $SLURMD_NODENAME"
  while [ ! -e go ]; do sleep 0.2; done
  echo "task $SLURM_PROCID done"'
echo "srun exit $?"
exit 0
EOF
rm -f "$jobs_dir/go"
(
  # Crash n3 once its task runs, wait until Slurm declares it down, then let the others finish.
  for i in {1..100}; do
    [[ $(grep -c '^task . on' "$jobs_dir/nodefail.out" 2>/dev/null) == 3 ]] && break
    sleep 0.2
  done
  rtft_cluster_crash_node n3
  for i in {1..60}; do
    sinfo -h -N -n n3 -o %t | grep -q down && break
    sleep 0.5
  done
  echo "n3 is $(sinfo -h -N -n n3 -o %t) after the crash"
  touch "$jobs_dir/go"
) &
crasher=$!
run_job nodefail 90 "$jobs_dir/nodefail.sh"
wait "$crasher"
if ((job_rc != 0)); then fail "node-failure job exited $job_rc"; fi
expect_out '^task 0 done' "node-failure job (n1 survives)"
expect_out '^task 1 done' "node-failure job (n2 survives)"
expect_out 'Node failure on n3' "node-failure job (srun saw n3 fail)"
show_out_if_failed
rtft_cluster_restart_node n3
rtft_cluster_wait_idle "$nodes" || fail "n3 did not come back after its slurmd restarted"

if [[ ! -x "$dp_launch" || ! -x "$test_app" ]]; then
  if [[ -x "$dp_launch" ]]; then
    fail "dp-launch is built but the test application $test_app is not"
  else
    echo "NOTE: dp-launch ($dp_launch) is not built:" \
      "only the cluster, the plain job and the node failure were tested"
  fi
  echo "slurm test: $failures failure(s) in $((SECONDS - start)) s"
  ((failures == 0))
  exit
fi

# 3. dp-launch through scripts/slurm/: 2 active slots + 1 spare on n1..n3, the test application
#    (tests/launcher/rtft_test_app.cc) logging to <dir>/slot-<S>.log. A generous heartbeat
#    timeout: CI's two cores are shared with other tests.
# The applications do not finish their last step before they saw epoch 2 (slot 1's loss), so the
# job cannot end before the failure the test makes, however fast the machine is.
export DP_LAUNCH=$dp_launch RTFT_TEST_STEPS=60 RTFT_TEST_STEP_MS=100 RTFT_TEST_WAIT_EPOCH=2
# A short grace: dp-mpirun.sbatch sets mpirun's odls_base_sigkill_timeout to it plus 2, and
# mpirun takes about twice that to return after a job that lost a slot.
dp_opts=(--spares 1 --heartbeat-timeout-ms 2000 --shutdown-grace-s 2 --log-level info)

# wait_for_step DIR SLOT STEP: until slot SLOT's application logged step STEP (30 s at most).
wait_for_step() {
  local i
  for i in {1..150}; do
    grep -Eq "^step rank=[0-9]+ step=$3 " "$1/slot-$2.log" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "slot $2 never reached step $3"
  return 1
}

# expect_app DIR SLOT PATTERN WHAT: slot SLOT's application log matches PATTERN.
expect_app() {
  if ! grep -Eq -- "$3" "$1/slot-$2.log" 2>/dev/null; then
    fail "$4: $1/slot-$2.log lacks /$3/"
    return 1
  fi
}

# The spare (slot 2) took logical rank 1 and finished the steps; the survivors saw the event.
expect_spare_took_over() {
  local dir=$1 what=$2
  expect_app "$dir" 2 '^start .* slot=2 role=spare-activated rank=1 ' "$what: spare activated as rank 1"
  expect_app "$dir" 2 '^resume rank=1 step=[1-9]' "$what: spare resumed rank 1's step"
  expect_app "$dir" 2 '^exit rank=1 code=0 why=done' "$what: spare finished rank 1's steps"
  expect_app "$dir" 0 '^event .* failed=1 ' "$what: rank 0 was told rank 1 failed"
  expect_app "$dir" 0 '^exit rank=0 code=0 why=done' "$what: rank 0 finished"
  if ((failures > failures_shown)); then
    for f in "$dir"/slot-*.log; do
      echo "    == $f"
      grep -v '^step ' "$f" | sed 's/^/    | /'
    done
  fi
}

# 3a. mpirun --enable-recovery: slot 1's dp-launch and application are SIGKILLed (the orted of
#     n2 stays: Open MPI 4.1 ends the whole job when it loses a node's daemon).
app_dir=$jobs_dir/mpirun-app
mkdir -p "$app_dir"
(
  wait_for_step "$app_dir" 1 5 || exit
  mapfile -t pids < <(rtft_cluster_pids_with_env OMPI_COMM_WORLD_RANK=1 | rtft_with_descendants)
  echo "killing slot 1 (dp-launch and its application): ${pids[*]}"
  kill -KILL "${pids[@]}"
) &
killer=$!
RTFT_TEST_DIR=$app_dir run_job mpirun 120 "$repo/scripts/slurm/dp-mpirun.sbatch" \
  "${dp_opts[@]}" -- "$test_app"
wait "$killer"
if ((job_rc != 0)); then fail "mpirun variant: job exited $job_rc"; fi
expect_out 'the job.s exit code \(slot 0\) is 0' "mpirun variant: exit code from slot 0"
show_out_if_failed
expect_spare_took_over "$app_dir" "mpirun variant"

# 3b. srun that kills every task when one fails: dp-launch must say the job cannot survive a
#     lost slot. srun --kill-on-bad-exit=1 is invisible to the tasks; given through the
#     environment (SLURM_KILL_BAD_EXIT=1, which srun reads like the option) dp-launch sees it.
#     Plain `srun` (the cluster's KillOnBadExit, unknown to the task) must be warned about too.
cat >"$jobs_dir/srun-warn.sh" <<EOF
#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --no-kill
"$dp_launch" --new-key-file "$jobs_dir/warn.keys" || exit 1
echo "== srun with SLURM_KILL_BAD_EXIT=1"
SLURM_KILL_BAD_EXIT=1 srun "$dp_launch" --job-key-file "$jobs_dir/warn.keys" --spares 1 -- "$test_app"
echo "== plain srun"
unset SLURM_KILL_BAD_EXIT
srun "$dp_launch" --job-key-file "$jobs_dir/warn.keys" --spares 1 -- "$test_app"
EOF
app_dir=$jobs_dir/warn-app
mkdir -p "$app_dir"
RTFT_TEST_DIR=$app_dir RTFT_TEST_STEPS=3 RTFT_TEST_WAIT_EPOCH=0 run_job srun-warn 60 "$jobs_dir/srun-warn.sh"
if ((job_rc != 0)); then fail "srun that kills on a bad exit: job exited $job_rc"; fi
if ! sed -n '/^== srun with/,/^== plain/p' "$job_out" |
  grep -q 'dp-launch: warning: .*kill-on-bad-exit'; then
  fail "srun --kill-on-bad-exit=1 (SLURM_KILL_BAD_EXIT=1): dp-launch did not warn"
fi
if ! sed -n '/^== plain/,$p' "$job_out" | grep -q 'dp-launch: warning: .*kill-on-bad-exit'; then
  fail "plain srun (SLURM_KILL_BAD_EXIT unset): dp-launch did not warn"
fi
show_out_if_failed

# 3c. srun --kill-on-bad-exit=0 --no-kill: node n2 crashes (slurmd, slurmstepd, dp-launch and
#     the application of slot 1 SIGKILLed at once); the spare on n3 takes rank 1, Slurm marks
#     n2 down and the step goes on without it.
app_dir=$jobs_dir/srun-app
mkdir -p "$app_dir"
(
  wait_for_step "$app_dir" 1 5 || exit
  rtft_cluster_crash_node n2
) &
killer=$!
RTFT_TEST_DIR=$app_dir run_job srun 120 "$repo/scripts/slurm/dp-srun.sbatch" \
  "${dp_opts[@]}" -- "$test_app"
wait "$killer"
if ((job_rc != 0)); then fail "srun variant: job exited $job_rc"; fi
if grep -q 'dp-launch: warning' "$job_out"; then fail "srun variant: dp-launch warned"; fi
expect_out 'the job.s exit code \(slot 0\) is 0' "srun variant: exit code from slot 0"
show_out_if_failed
expect_spare_took_over "$app_dir" "srun variant"
if compgen -G "$jobs_dir/.rtft-job-*" >/dev/null; then
  fail "srun variant: key, endpoint or exit-code files left behind: $(echo "$jobs_dir"/.rtft-job-*)"
fi

# 4. The trainer under srun: 2 active slots + 1 spare, a run without failures, then the same run
#    whose rank 1 stops at a named point of step 20 (so the crash always lands mid-run, however
#    fast the machine) and whose node n2 then crashes: the spare on n3 takes rank 1, its state
#    from rank 0's replica, and the run ends with the first run's digest, bit for bit.
if [[ -x "$trainer" ]]; then
  # n2 crashed in 3c: back to three nodes first.
  rtft_cluster_restart_node n2
  rtft_cluster_wait_idle "$nodes" || fail "n2 did not come back after its slurmd restarted"
  train_args=(--steps 40 --hidden 256 --batch 8 --log-every 10)
  RTFT_FAULT_LOG=$jobs_dir/train-ref-faults.log run_job train-ref 120 \
    "$repo/scripts/slurm/dp-srun.sbatch" "${dp_opts[@]}" -- "$trainer" "${train_args[@]}"
  if ((job_rc != 0)); then fail "trainer, no failure: job exited $job_rc"; fi
  ref=$(sed -n 's/^\[train 0\] done .* digest=\([0-9a-f]*\) .*/\1/p' "$job_out")
  [[ -n "$ref" ]] || fail "trainer, no failure: rank 0 printed no digest"
  show_out_if_failed
  faults=$jobs_dir/train-faults.log
  rm -f "$faults"
  (
    for i in {1..300}; do
      grep -q '^fault protect.update hang' "$faults" 2>/dev/null && break
      sleep 0.2
    done
    rtft_cluster_crash_node n2
  ) &
  killer=$!
  # The hang only marks the moment to crash the node: the hang detector stays out of it
  # (docs/testing.md).
  RTFT_HANG_K=0 RTFT_FAULT_LOG=$faults run_job train 120 "$repo/scripts/slurm/dp-srun.sbatch" "${dp_opts[@]}" \
    -- "$trainer" "${train_args[@]}" --fault 1:protect.update@20:hang
  wait "$killer"
  if ((job_rc != 0)); then fail "trainer, node crash: job exited $job_rc"; fi
  expect_out '^\[train 1\] start role=spare-activated' "trainer, node crash: the spare took rank 1"
  expect_out '^\[train 1\] recovered ' "trainer, node crash: rank 1's state was recovered"
  got=$(sed -n 's/^\[train 0\] done .* digest=\([0-9a-f]*\) .*/\1/p' "$job_out")
  if [[ -z "$got" || "$got" != "$ref" ]]; then
    fail "trainer, node crash: digest '$got', the run without failures ended with '$ref'"
  fi
  show_out_if_failed
  rtft_cluster_restart_node n2
  rtft_cluster_wait_idle "$nodes" || fail "n2 did not come back after its slurmd restarted"

  # 5. --coordinator-slot dedicated under srun on four nodes: slot 0 (task 0, on n1: the batch
  #    host) runs only the coordinator; ranks 0 and 1 run on n2 and n3, the spare on n4. Rank 0
  #    stops at a named point of step 20 and its node n2 crashes: an ordinary slot loss, the
  #    spare takes rank 0 and the run ends with section 4's digest.
  faults=$jobs_dir/dedicated-faults.log
  layout=$jobs_dir/dedicated-layout
  rm -f "$faults" "$layout"
  (
    for i in {1..300}; do
      grep -q '^fault protect.update hang' "$faults" 2>/dev/null && break
      sleep 0.2
    done
    # Where slot 0 runs, and what: its dp-launch alone, on the batch host.
    for pid in $(rtft_cluster_pids_with_env SLURM_PROCID=0 SLURM_STEPID=0 "RTFT_FAULT_LOG=$faults"); do
      printf '%s %s %s\n' "$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^SLURMD_NODENAME=//p')" \
        "$(cat "/proc/$pid/comm")" "$(rtft_with_descendants <<<"$pid" | wc -l)" >>"$layout"
    done
    rtft_cluster_crash_node n2
  ) &
  killer=$!
  RTFT_HANG_K=0 RTFT_FAULT_LOG=$faults run_job dedicated 150 --nodes=4 "$repo/scripts/slurm/dp-srun.sbatch" \
    --coordinator-slot dedicated "${dp_opts[@]}" \
    -- "$trainer" "${train_args[@]}" --fault 0:protect.update@20:hang
  wait "$killer"
  if ((job_rc != 0)); then fail "dedicated coordinator, node crash: job exited $job_rc"; fi
  expect_out 'slot 0 runs only the coordinator' "dedicated coordinator: slot 0 ran no application"
  expect_out '^\[train 0\] start role=spare-activated' "dedicated coordinator: the spare took rank 0"
  expect_out '^\[train 0\] recovered ' "dedicated coordinator: rank 0's state was recovered"
  if [[ "$(sort -u "$layout" 2>/dev/null)" != "n1 dp-launch 1" ]]; then
    fail "dedicated coordinator: slot 0 should be one dp-launch on n1, alone; saw: $(cat "$layout" 2>/dev/null)"
  fi
  got=$(sed -n 's/^\[train 1\] done .* digest=\([0-9a-f]*\) .*/\1/p' "$job_out")
  if [[ -z "$got" || "$got" != "$ref" ]]; then
    fail "dedicated coordinator, node crash: digest '$got', the run without failures ended with '$ref'"
  fi
  show_out_if_failed
  rtft_cluster_restart_node n2
  rtft_cluster_wait_idle "$nodes" || fail "n2 did not come back after its slurmd restarted"
elif [[ -n "$trainer" ]]; then
  fail "the trainer $trainer is not built"
fi

echo "slurm test: $failures failure(s) in $((SECONDS - start)) s"
((failures == 0))
