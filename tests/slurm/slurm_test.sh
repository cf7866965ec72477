#!/usr/bin/env bash
# The Slurm batch scripts of scripts/slurm/ against a real slurmctld and three slurmd ("nodes"
# n1..n3 of one machine) that tests/slurm/local_cluster.sh starts on localhost.
#
#   slurm_test.sh REPO_ROOT DP_LAUNCH TEST_APP
#
# Always: a plain job proves the cluster (3 nodes allocated with --no-kill, a task killed under
# srun --kill-on-bad-exit=0 leaves the others running). When DP_LAUNCH and TEST_APP exist: the
# mpirun and the srun variant each run 2 active slots + 1 spare, one slot is killed, and the job
# still exits 0 with a spare in its place; srun without --kill-on-bad-exit=0 is warned about.
# Exit 77 (skipped) when not root or when Slurm cannot be started here.
set -u
repo=$1
dp_launch=$2
test_app=$3

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
rtft_cluster_start "$tmp/cluster" 3
rc=$?
if ((rc == 77)); then
  echo "SKIP: Slurm cannot run here (see above)"
  exit 77
elif ((rc != 0)); then
  echo "FAIL: the local Slurm cluster did not start"
  failures=1
  exit 1
fi
jobs_dir=$tmp/cluster/jobs
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
rtft_cluster_wait_idle 3 || fail "n3 did not come back after its slurmd restarted"

if [[ -x "$dp_launch" && -x "$test_app" ]]; then
  echo "dp-launch: $dp_launch, test application: $test_app"
else
  echo "NOTE: dp-launch ($dp_launch) or the test application ($test_app) is not built:" \
    "only the cluster and the plain job were tested"
fi

echo "slurm test: $failures failure(s) in $((SECONDS - start)) s"
((failures == 0))
