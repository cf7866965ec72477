#!/usr/bin/env bash
# Installs the built project into a fresh prefix, then configures, builds and runs the consumer
# project against it with find_package(rtft). Driven by ctest (tests/install/CMakeLists.txt).
#
#   install_consumer.sh BUILD_DIR CONSUMER_SRC WORK_DIR GENERATOR COMPILER_DEFINITION
#
# COMPILER_DEFINITION is the consumer's compiler as a CMake definition (CMAKE_CXX_COMPILER=...
# or CMAKE_C_COMPILER=...); CONSUMER_SRC/expected.txt holds the lines its app must print.
set -euo pipefail

build_dir="$1" consumer_src="$2" work="$3" generator="$4" compiler="$5"

rm -rf "${work}"
mkdir -p "${work}"
prefix="${work}/prefix"

echo "--- cmake --install ${build_dir} --prefix ${prefix}"
cmake --install "${build_dir}" --prefix "${prefix}" >"${work}/install.log"

config="$(find "${prefix}" -name rtftConfig.cmake -print -quit)"
[[ -n "${config}" ]] || {
  echo "FAIL: no rtftConfig.cmake installed under ${prefix}"
  exit 1
}
for f in rtftConfigVersion.cmake rtftTargets.cmake; do
  [[ -f "$(dirname "${config}")/${f}" ]] || {
    echo "FAIL: ${f} missing next to ${config}"
    exit 1
  }
done
for h in export.h status.h state.h rtft.h; do
  [[ -f "${prefix}/include/rtft/${h}" ]] || {
    echo "FAIL: include/rtft/${h} not installed"
    exit 1
  }
done
# The Fortran module, where the build has it (a Fortran compiler was found).
if compgen -G "${build_dir}/lib/librt-ft-fortran.so*" >/dev/null; then
  for f in include/rtft/rtft.f90 include/rtft/rtft_c.f90 include/rtft/rtft.mod include/rtft/rtft_c.mod; do
    [[ -f "${prefix}/${f}" ]] || {
      echo "FAIL: ${f} not installed"
      exit 1
    }
  done
  compgen -G "${prefix}/lib*/librt-ft-fortran.so*" >/dev/null || {
    echo "FAIL: librt-ft-fortran not installed"
    exit 1
  }
fi
# The installed package must not point back into the source or build tree.
if grep -rqF -e "${build_dir}" "$(dirname "${config}")"; then
  echo "FAIL: installed package files mention the build tree:"
  grep -rnF -e "${build_dir}" "$(dirname "${config}")"
  exit 1
fi

echo "--- configure consumer (CMAKE_PREFIX_PATH=${prefix})"
cmake -S "${consumer_src}" -B "${work}/consumer" -G "${generator}" \
  -D"${compiler}" -DCMAKE_PREFIX_PATH="${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
echo "--- build consumer"
cmake --build "${work}/consumer"

app="${work}/consumer/app"
[[ -x "${app}" ]] || app="$(find "${work}/consumer" -name app -type f -perm -u+x -print -quit)"
echo "--- run ${app}"
# ldd shows which librt-ft the consumer loads: it must be the installed one.
lib="$(ldd "${app}" | awk '/librt-ft/ {print $3}')"
echo "librt-ft: ${lib}"
[[ "${lib}" == "${prefix}"/* ]] || {
  echo "FAIL: consumer does not load librt-ft from ${prefix}"
  exit 1
}
output="$("${app}")"
echo "${output}"
mapfile -t expected <"${consumer_src}/expected.txt"
for line in "${expected[@]}"; do
  grep -qxF -e "${line}" <<<"${output}" || {
    echo "FAIL: expected line not printed: ${line}"
    exit 1
  }
done
echo "PASS: installed package found, consumer built and ran"
