#!/usr/bin/env bash
# Packs a build for a machine that has none of rt-ft's dependencies installed (the lent GPU
# machine): the build's binaries and tests plus every shared library they load that is not part
# of the base system or the CUDA driver, into one folder. On the other machine:
#   export LD_LIBRARY_PATH=$PWD/<bundle>/lib; <bundle>/bin/rtft-bench ...
# Usage: scripts/bundle-for-device.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build="${1:-build}"
out="${2:-.dev/bundle}"
rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/tests" "${out}/lib"
cp -a "${build}/bin/." "${out}/bin/"
find "${build}/tests" -maxdepth 1 -type f -executable -exec cp -a {} "${out}/tests/" \;
find "${build}/lib" -maxdepth 1 -name "*.so*" -exec cp -a {} "${out}/lib/" \;
# Libraries the target machine has: the C runtime, the GPU driver; NCCL comes from its PyTorch.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libgcc_s|libstdc\+\+|libcuda\.so|libnvidia|libnccl)'
for f in "${out}"/bin/* "${out}"/tests/* "${out}"/lib/*.so*; do
  ldd "${f}" 2>/dev/null | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "${name}" =~ ${skip} ]] && continue
  [[ -e "${out}/lib/${name}" ]] || cp -L "${path}" "${out}/lib/${name}"
done
du -sh "${out}"
