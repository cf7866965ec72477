#!/usr/bin/env bash
# Submits an rt-ft job with warm spares: allocates N + S nodes (one slot per node, --no-kill)
# and runs dp-launch on every node through mpirun or srun (dp-mpirun.sbatch, dp-srun.sbatch).
#
#   scripts/slurm/submit.sh [--launcher mpirun|srun] --nodes N [--spares S] [--wait]
#                           [--dedicated-coordinator] [--sbatch-arg ARG]...
#                           -- [dp-launch options --] APP [ARGS]
#
# Everything after the first `--` goes to dp-launch; when it holds a second `--`, what lies
# before it are dp-launch options, otherwise it is the application and its arguments.
# --spares S is passed to dp-launch as --spares S (default 1). --wait makes sbatch wait for the
# job and exit with its exit code. --dedicated-coordinator allocates one node more, the batch
# host, whose slot 0 runs only the coordinator (dp-launch --coordinator-slot dedicated). Prints
# sbatch's output (the job id).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
launcher=mpirun
nodes=""
spares=1
dedicated=0
sbatch_args=()

usage() {
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
  exit 2
}

while (($#)); do
  case $1 in
    --launcher) launcher=${2:?}; shift 2 ;;
    --nodes) nodes=${2:?}; shift 2 ;;
    --spares) spares=${2:?}; shift 2 ;;
    --wait) sbatch_args+=(--wait); shift ;;
    --dedicated-coordinator) dedicated=1; shift ;;
    --sbatch-arg) sbatch_args+=("${2:?}"); shift 2 ;;
    --sbatch-arg=*) sbatch_args+=("${1#*=}"); shift ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "submit.sh: unknown option '$1'" >&2; usage ;;
  esac
done
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --nodes N (active slots) is required" >&2; usage; }
[[ "$spares" =~ ^[0-9]+$ ]] || { echo "submit.sh: --spares wants a number" >&2; usage; }
(($#)) || { echo "submit.sh: no application given" >&2; usage; }
case $launcher in
  mpirun | srun) ;;
  *) echo "submit.sh: --launcher is mpirun or srun, not '$launcher'" >&2; usage ;;
esac

# Split "[dp-launch options --] APP [ARGS]".
dp_opts=()
for ((i = 1; i <= $#; i++)); do
  if [[ "${!i}" == -- ]]; then
    dp_opts=("${@:1:i-1}")
    shift "$i"
    break
  fi
done

if ((dedicated)); then dp_opts=(--coordinator-slot dedicated "${dp_opts[@]}"); fi
exec sbatch --nodes=$((nodes + spares + dedicated)) --ntasks-per-node=1 --no-kill \
  "${sbatch_args[@]}" "$here/dp-$launcher.sbatch" --spares "$spares" "${dp_opts[@]}" -- "$@"
