# shellcheck shell=bash
# A throw-away Slurm cluster on localhost for the slurm tests: a private munged, one slurmctld
# and one slurmd per "node", all as root, all state under one directory, started by hand (there
# is no service manager in CI). Source it, then:
#
#   rtft_cluster_start DIR NODES   start; exports SLURM_CONF; 0 when every node is idle,
#                                  77 when Slurm cannot run here (not root, a tool missing, no
#                                  free port), 1 on other errors (nodes that never became
#                                  idle: the logs are printed; stop, then try again). DIR's
#                                  parents must be searchable by all (munged checks the path).
#   rtft_cluster_stop              stop every daemon this shell started (call it from a trap)
#   rtft_cluster_logs              print the daemons' logs (for a failing test)
#   rtft_cluster_wait_idle NODES   wait (60 s at most) until NODES nodes are idle
#   rtft_cluster_crash_node NODE   SIGKILL everything of NODE (slurmd, slurmstepd, tasks)
#   rtft_cluster_pids_with_env VAR=VALUE...  pids of this cluster's processes with that env
#   rtft_with_descendants          the pids read from stdin and all their descendants
#   rtft_cluster_restart_node NODE start NODE's slurmd again (ReturnToService=2 takes it back)
#
# Several nodes on one host: Debian 12's slurm-wlm 22.05 accepts `slurmd -N NAME` with one
# NodeName line per node, each with its own Port (what upstream calls "multiple slurmd"), so a
# job sees NODES distinct nodes (SLURM_NNODES, one task per node, --no-kill per node) while all
# of them run on this machine's cores. Ports are chosen at random among free ones and munge
# listens on a socket of its own, so this cluster does not meet a system munged or Slurm.

RTFT_CLUSTER_DIR=""
RTFT_CLUSTER_PIDS=()
declare -A RTFT_CLUSTER_SLURMD=()  # node name -> slurmd pid

_rtft_cluster_log() { printf '[cluster] %s\n' "$*" >&2; }

# True when something accepts TCP connections on 127.0.0.1:PORT.
_rtft_port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Prints a base port P such that P .. P+COUNT are all free, below the kernel's ephemeral range
# (ip_local_port_range): a port found free there could be handed to another process's outgoing
# connection or listener (Gloo's pairs, in the tests that run beside this one) before the daemon
# binds it.
_rtft_free_ports() {
  local count=$1 base p busy low=32768 span
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  span=$((low - 10000 - count - 1))
  ((span > 0)) || span=1000
  for _ in {1..50}; do
    base=$((10000 + RANDOM % span))
    busy=0
    for ((p = base; p <= base + count; p++)); do
      if _rtft_port_busy "$p"; then
        busy=1
        break
      fi
    done
    if ((busy == 0)); then
      echo "$base"
      return 0
    fi
  done
  return 1
}

# Starts a daemon in the background (its output to LOG) and remembers its pid.
_rtft_spawn() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  RTFT_CLUSTER_PIDS+=($!)
  echo "$!" >>"$RTFT_CLUSTER_DIR/run/pids"
}

_rtft_write_conf() {
  local dir=$1 nodes=$2 port=$3 host=$4 cpus=$5 i
  cat >"$dir/slurm.conf" <<EOF
# Written by tests/slurm/local_cluster.sh for one test run.
ClusterName=rtftci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
SlurmctldPort=$port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# No cgroups in a container: track processes through /proc, bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=6
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=300
EOF
  for ((i = 1; i <= nodes; i++)); do
    echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + i)) CPUs=$cpus State=UNKNOWN"
  done >>"$dir/slurm.conf"
  echo "PartitionName=ci Nodes=n[1-$nodes] Default=YES MaxTime=15 State=UP" >>"$dir/slurm.conf"
}

_rtft_start_munge() {
  local dir=$1
  # munged insists that everyone may traverse the socket's directory, and that the key is
  # private to its owner.
  mkdir -p "$dir/munge" && chmod 755 "$dir" "$dir/munge" || return 1
  if command -v mungekey >/dev/null; then
    mungekey -c -k "$dir/munge/munge.key" >/dev/null 2>&1 || return 1
  else
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none || return 1
  fi
  chmod 600 "$dir/munge/munge.key"
  _rtft_spawn "$dir/log/munged.out" munged -F --key-file="$dir/munge/munge.key" \
    --socket="$dir/munge/munge.sock" --pid-file="$dir/run/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
  local i pid=${RTFT_CLUSTER_PIDS[-1]}
  for i in {1..50}; do
    kill -0 "$pid" 2>/dev/null || break
    if munge -S "$dir/munge/munge.sock" -n 2>/dev/null | unmunge -S "$dir/munge/munge.sock" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  _rtft_cluster_log "munged did not answer on $dir/munge/munge.sock:"
  tail -n 5 "$dir/log/munged.out" >&2
  return 1
}

# Waits until sinfo reports NODES idle nodes.
rtft_cluster_wait_idle() {
  local nodes=$1 deadline=$((SECONDS + 60)) idle
  while ((SECONDS < deadline)); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    if ((idle == nodes)); then return 0; fi
    sleep 0.5
  done
  _rtft_cluster_log "only $idle of $nodes nodes became idle within 60 s:"
  sinfo -N -l >&2 || true
  return 1
}

# slurmd carries RTFT_CLUSTER_NODE in its environment, and so do the slurmstepd it forks:
# that is how rtft_cluster_crash_node finds a node's processes on a shared host. The value names
# the cluster too: another cluster on the same host (another test run) has nodes of the same
# names, and crashing ours must not touch its processes.
_rtft_node_marker() { printf 'RTFT_CLUSTER_NODE=%s@%s' "$1" "$RTFT_CLUSTER_DIR"; }

_rtft_start_slurmd() {
  local node=$1
  _rtft_spawn "$RTFT_CLUSTER_DIR/log/slurmd-$node.out" \
    env "$(_rtft_node_marker "$node")" slurmd -D -N "$node" -f "$SLURM_CONF"
  RTFT_CLUSTER_SLURMD[$node]=${RTFT_CLUSTER_PIDS[-1]}
}

rtft_cluster_start() {
  local dir=$1 nodes=$2 cmd
  if ((EUID != 0)); then
    _rtft_cluster_log "not root: slurmd must run as root"
    return 77
  fi
  for cmd in munged munge unmunge slurmctld slurmd sbatch srun sinfo scontrol; do
    if ! command -v "$cmd" >/dev/null; then
      _rtft_cluster_log "$cmd not found (apt-get install slurmctld slurmd slurm-client munge)"
      return 77
    fi
  done
  RTFT_CLUSTER_DIR=$dir
  mkdir -p "$dir"/{state,spool,run,log,jobs} || return 1
  _rtft_start_guard
  local i
  for ((i = 1; i <= nodes; i++)); do mkdir -p "$dir/spool/n$i"; done

  local port host cpus
  port=$(_rtft_free_ports $((nodes + 1))) || {
    _rtft_cluster_log "no free TCP ports"
    return 77
  }
  host=$(hostname -s)
  cpus=$(nproc)
  _rtft_write_conf "$dir" "$nodes" "$port" "$host" "$cpus"
  export SLURM_CONF=$dir/slurm.conf

  _rtft_start_munge "$dir" || return 77
  _rtft_spawn "$dir/log/slurmctld.out" slurmctld -D -f "$SLURM_CONF"
  for ((i = 1; i <= nodes; i++)); do _rtft_start_slurmd "n$i"; done
  if ! rtft_cluster_wait_idle "$nodes"; then
    rtft_cluster_logs
    return 1
  fi
  _rtft_cluster_log "$nodes nodes idle (slurmctld port $port, state in $dir)"
}

# Should this shell die without running its trap (SIGKILL, a ctest timeout), a guard process
# kills every daemon listed in run/pids (_rtft_spawn appends to it).
RTFT_CLUSTER_GUARD=""
_rtft_start_guard() {
  # shellcheck disable=SC2016
  bash -c 'trap "" INT TERM HUP
    while kill -0 "$1" 2>/dev/null; do sleep 1; done
    xargs -r kill -KILL <"$2" 2>/dev/null' rtft-cluster-guard "$$" "$RTFT_CLUSTER_DIR/run/pids" \
    </dev/null >/dev/null 2>&1 &
  RTFT_CLUSTER_GUARD=$!
}

rtft_cluster_stop() {
  local pid i alive
  # Cancel what is still queued or running, so slurmstepd and job processes go away too.
  if [[ -n "${SLURM_CONF:-}" && -f "${SLURM_CONF}" ]]; then
    timeout 10 scancel --quiet --user=root 2>/dev/null || true
    for i in {1..30}; do
      [[ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
      sleep 0.5
    done
  fi
  # Daemons in reverse order of start: slurmd, then slurmctld, then munged.
  for ((i = ${#RTFT_CLUSTER_PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${RTFT_CLUSTER_PIDS[i]}" 2>/dev/null || true
  done
  for i in {1..100}; do
    alive=0
    for pid in "${RTFT_CLUSTER_PIDS[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive == 0)) && break
    sleep 0.1
  done
  for pid in "${RTFT_CLUSTER_PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      _rtft_cluster_log "pid $pid ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  RTFT_CLUSTER_PIDS=()
  if [[ -n "$RTFT_CLUSTER_GUARD" ]]; then
    kill -KILL "$RTFT_CLUSTER_GUARD" 2>/dev/null
    wait "$RTFT_CLUSTER_GUARD" 2>/dev/null
    RTFT_CLUSTER_GUARD=""
  fi
}

# Prints the pids given on stdin and those of all their descendants.
rtft_with_descendants() {
  local -A children=()
  local stat pid ppid rest
  for stat in /proc/[0-9]*/stat; do
    read -r pid rest 2>/dev/null <"$stat" || continue
    rest=${rest##*) }  # after "(comm) ": state ppid ...
    read -r _ ppid _ <<<"$rest"
    children[$ppid]+=" $pid"
  done
  local queue=() seen=" "
  mapfile -t queue
  while ((${#queue[@]})); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -z "$pid" || "$seen" == *" $pid "* ]] && continue
    seen+="$pid "
    echo "$pid"
    # Word splitting is intended: a space-separated list of pids.
    # shellcheck disable=SC2206
    queue+=(${children[$pid]:-})
  done
}

# Pids of the processes whose environment holds every VAR=VALUE given (this cluster's only:
# SLURM_CONF=ours is always required), without their descendants.
rtft_cluster_pids_with_env() {
  local f pid kv ok
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}
    pid=${pid%/environ}
    ((pid == $$ || pid == BASHPID)) && continue
    ok=1
    for kv in "SLURM_CONF=$SLURM_CONF" "$@"; do
      grep -qxzF -- "$kv" "$f" 2>/dev/null || {
        ok=0
        break
      }
    done
    ((ok)) && echo "$pid"
  done
}

# Pids of the processes of NODE of this cluster: slurmd and slurmstepd (its node marker), the
# job tasks (SLURMD_NODENAME=NODE and this cluster's SLURM_CONF), and whatever they started.
_rtft_node_pids() {
  local node=$1 f pid marker
  marker=$(_rtft_node_marker "$node")
  {
    for f in /proc/[0-9]*/environ; do
      pid=${f#/proc/}
      pid=${pid%/environ}
      if grep -qxzF "$marker" "$f" 2>/dev/null; then echo "$pid"; fi
    done
    rtft_cluster_pids_with_env "SLURMD_NODENAME=$node"
  } | rtft_with_descendants
}

rtft_cluster_crash_node() {
  local node=$1 pids
  mapfile -t pids < <(_rtft_node_pids "$node")
  _rtft_cluster_log "crashing $node: SIGKILL ${#pids[@]} processes"
  ((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null
  wait "${RTFT_CLUSTER_SLURMD[$node]}" 2>/dev/null
  return 0
}

rtft_cluster_restart_node() {
  _rtft_start_slurmd "$1"
}

rtft_cluster_logs() {
  local f
  [[ -n "$RTFT_CLUSTER_DIR" ]] || return 0
  for f in "$RTFT_CLUSTER_DIR"/log/*; do
    [[ -s "$f" ]] || continue
    echo "----- $f (last 40 lines)"
    tail -n 40 "$f"
  done
}
