# shellcheck shell=bash
# Shared by scripts/test.sh and scripts/demo.sh: install what is missing (Debian 12, apt-get),
# configure build/ with Ninja, build. Source it; do not run it.
#
# Environment:
#   RTFT_BUILD_DIR    build directory (default: <repo>/build)
#   RTFT_BUILD_TYPE   CMake build type (default: RelWithDebInfo; with CI=true, line tables only)
#   RTFT_CMAKE_ARGS   extra arguments for the configure step, e.g. "-DRTFT_WITH_CUDA=OFF"
#   RTFT_JOBS         parallel build jobs (default: all cores)
#   RTFT_SKIP_DEPS=1  never call apt-get (report missing packages and go on)

set -euo pipefail

RTFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RTFT_BUILD_DIR="${RTFT_BUILD_DIR:-${RTFT_ROOT}/build}"

# Everything the build, the tests and the tools need. Keep in sync with the README.
RTFT_APT_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libhdf5-dev hdf5-tools liburing-dev libxxhash-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libopenmpi-dev openmpi-bin libzmq3-dev cppzmq-dev libgloo-dev
  python3-h5py python3-numpy python3-xxhash clang-format
  # The Fortran module over the C API (include/rtft/rtft.f90) and its test (tests/fortran).
  gfortran
  # The Python module rtft (src/python) and its tests: Debian's interpreter, torch and NumPy.
  python3-dev pybind11-dev python3-torch
  # The control-plane decoder's libFuzzer target (scripts/fuzz.sh, the `fuzz` ctest).
  clang libclang-rt-14-dev
  # MPICH next to Open MPI (which stays the default: its alternatives have priority 50, MPICH's
  # 40) for the MPICH launcher test, which builds a second dp-launch (tests/launcher/).
  mpich libmpich-dev
  # The slurm test starts its own munged, slurmctld and slurmd on localhost (tests/slurm/).
  slurmctld slurmd slurm-client munge
)

rtft_log() { printf '==> %s\n' "$*" >&2; }
rtft_die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Prints the packages of RTFT_APT_PACKAGES that are not installed, one per line.
rtft_missing_packages() {
  local pkg state
  for pkg in "${RTFT_APT_PACKAGES[@]}"; do
    state="$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null || true)"
    [[ "${state}" == "installed" ]] || printf '%s\n' "${pkg}"
  done
}

rtft_install_deps() {
  command -v dpkg-query >/dev/null || rtft_die "dpkg-query not found: scripts/ support Debian 12 only"
  local missing
  mapfile -t missing < <(rtft_missing_packages)
  if ((${#missing[@]} == 0)); then
    rtft_log "all ${#RTFT_APT_PACKAGES[@]} required packages are installed"
    return 0
  fi
  if [[ "${RTFT_SKIP_DEPS:-0}" == 1 ]]; then
    rtft_log "RTFT_SKIP_DEPS=1: not installing missing packages: ${missing[*]}"
    return 0
  fi
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null ||
      rtft_die "missing packages (${missing[*]}) and not root; install them or run as root"
    sudo=(sudo)
  fi
  rtft_log "installing missing packages: ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
  mapfile -t missing < <(rtft_missing_packages)
  ((${#missing[@]} == 0)) || rtft_die "still missing after apt-get install: ${missing[*]}"
}

rtft_configure() {
  local cache="${RTFT_BUILD_DIR}/CMakeCache.txt"
  if [[ -f "${cache}" ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "${cache}"; then
    rtft_die "${RTFT_BUILD_DIR} was configured with another generator; remove it and rerun"
  fi
  local extra=()
  # Word splitting is intended: RTFT_CMAKE_ARGS holds several -D options.
  # shellcheck disable=SC2206
  if [[ -n "${RTFT_CMAKE_ARGS:-}" ]]; then extra=(${RTFT_CMAKE_ARGS}); fi
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    rtft_log "nvcc found: CUDA paths are built (RTFT_WITH_CUDA defaults to ON)"
  fi
  # CI builds everything once and reads a failure's backtrace, never a local variable: line tables
  # (-g1) instead of full debug information, the same optimization and the same code. Measured on
  # two cores: 22-38 % less compile time per file; a fresh build 713 s instead of 1029 s (with
  # CLI11 kept out of shared headers, 2026-12-07).
  if [[ "${CI:-}" == true && -z "${RTFT_BUILD_TYPE:-}" ]]; then
    rtft_log "CI=true: RelWithDebInfo with line tables only (-g1)"
    local flags lang
    for lang in C CXX CUDA Fortran; do
      flags="-O2 -g1 -DNDEBUG"
      [[ "${lang}" == CUDA ]] && flags="-O2 -Xcompiler=-g1 -DNDEBUG"
      extra=("-DCMAKE_${lang}_FLAGS_RELWITHDEBINFO=${flags}" "${extra[@]}")
    done
  fi
  rtft_log "configuring ${RTFT_BUILD_DIR}"
  cmake -S "${RTFT_ROOT}" -B "${RTFT_BUILD_DIR}" -G Ninja \
    -DCMAKE_BUILD_TYPE="${RTFT_BUILD_TYPE:-RelWithDebInfo}" "${extra[@]}"
}

rtft_build() {
  local jobs="${RTFT_JOBS:-$(nproc)}"
  rtft_log "building with ${jobs} jobs"
  cmake --build "${RTFT_BUILD_DIR}" --parallel "${jobs}"
}

# Installs what is missing, configures and builds: the common prefix of test.sh and demo.sh.
rtft_setup() {
  rtft_install_deps
  rtft_configure
  rtft_build
}
