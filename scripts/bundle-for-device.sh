#!/usr/bin/env bash
# Packs a build for a machine that has none of rt-ft's dependencies installed (the lent GPU
# machine): the build's binaries and tests (all, or those named) plus every shared library they
# load that is not part of the base system, the CUDA driver, NCCL or MPI (the host's mpirun needs
# its own Open MPI; NCCL is chosen there with LD_LIBRARY_PATH), stripped of debug information, in
# one folder. On the other machine:
#   export LD_LIBRARY_PATH=$PWD/<bundle>/lib; <bundle>/bin/rtft-bench ...
# Usage: scripts/bundle-for-device.sh [BUILD_DIR] [OUT_DIR] [NAME...]
#   NAME: a program of BUILD_DIR/bin or a test of BUILD_DIR/tests (default: every one)
set -euo pipefail
build="${1:-build}"
out="${2:-.dev/bundle}"
shift $(($# < 2 ? $# : 2))
rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/tests" "${out}/lib"
if (($# == 0)); then
  cp -a "${build}/bin/." "${out}/bin/"
  find "${build}/tests" -maxdepth 1 -type f -executable -exec cp -a {} "${out}/tests/" \;
else
  for name in "$@"; do
    if [[ -f "${build}/bin/${name}" ]]; then
      cp -a "${build}/bin/${name}" "${out}/bin/"
    elif [[ -f "${build}/tests/${name}" ]]; then
      cp -a "${build}/tests/${name}" "${out}/tests/"
    else
      echo "error: ${name} is neither in ${build}/bin nor in ${build}/tests" >&2
      exit 2
    fi
  done
fi
find "${build}/lib" -maxdepth 1 -name "*.so*" -exec cp -a {} "${out}/lib/" \;
# Libraries the target machine has: the C runtime, the GPU driver, NCCL (PyTorch's or the
# system's) and its own Open MPI.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libgcc_s|libstdc\+\+|libcuda\.so|libnvidia|libnccl|libmpi|libopen-(rte|pal)|libpmix|libhwloc|libevent)'
for f in "${out}"/bin/* "${out}"/tests/* "${out}"/lib/*.so*; do
  [[ -f "${f}" && ! -L "${f}" ]] || continue
  ldd "${f}" 2>/dev/null | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "${name}" =~ ${skip} ]] && continue
  [[ -e "${out}/lib/${name}" ]] || cp -L "${path}" "${out}/lib/${name}"
done
find "${out}" -type f \( -perm -u+x -o -name "*.so*" \) -exec strip --strip-debug {} \; 2>/dev/null || true
du -sh "${out}"
