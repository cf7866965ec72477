#!/usr/bin/env bash
# Checks the dynamic symbol table of librt-ft: the library is built with -fvisibility=hidden, so
# the only symbols it may export are the RTFT_EXPORT declarations of include/rtft/. Fails on
#  - a strong symbol outside namespace rtft (a leaked helper or a statically linked dependency),
#  - an rtft:: symbol whose top-level name is not declared in a public header (an internal unit
#    such as ThreadPool or ParseBytes that lost its hidden visibility),
#  - a missing public entry point (an RTFT_EXPORT that got lost).
# Tolerated, and listed: weak/unique instantiations of standard-library templates (std::,
# __gnu_cxx::). libstdc++ declares namespace std with default visibility, so -fvisibility=hidden
# cannot hide them; they are vague-linkage copies that every user of those templates emits anyway.
#
#   check_exports.sh LIBRARY PUBLIC_INCLUDE_DIR
set -euo pipefail

lib="$1" include_dir="$2"
[[ -f "${lib}" ]] || {
  echo "FAIL: ${lib} not found"
  exit 1
}
mapfile -t headers < <(find "${include_dir}" -name '*.h')
((${#headers[@]} > 0)) || {
  echo "FAIL: no headers in ${include_dir}"
  exit 1
}

# Declarations only: a name mentioned in a comment does not make it public.
public_text="$(sed -e 's://.*$::' "${headers[@]}")"

mapfile -t symbols < <(nm -D --defined-only -C "${lib}" | cut -d' ' -f2-)
echo "${#symbols[@]} exported symbols in ${lib}"

bad=0
rtft_count=0
c_count=0
tolerated=()
exported=()
for line in "${symbols[@]}"; do
  type="${line%% *}"
  name="${line#* }"
  # Linker-defined markers, present in some toolchains' dynamic tables.
  case "${name}" in _init | _fini | _edata | _end | __bss_start) continue ;; esac
  # Compiler-generated data about a class: judge the class it describes.
  core="${name}"
  for prefix in "typeinfo name for " "typeinfo for " "vtable for " "VTT for " \
    "construction vtable for " "guard variable for " "non-virtual thunk to " \
    "virtual thunk to " "covariant return thunk to "; do
    core="${core#"${prefix}"}"
  done
  # The C API (include/rtft/rtft.h): extern "C" functions named rtft_*.
  if [[ "${type}" == T && "${core}" =~ ^rtft_[a-z0-9_]+$ ]]; then
    if grep -qw -e "${core}" <<<"${public_text}"; then
      c_count=$((c_count + 1))
      exported+=("${core}")
    else
      echo "FAIL: C function exported but not declared in ${include_dir}: ${line}"
      bad=1
    fi
    continue
  fi
  if [[ "${core}" == rtft::* ]]; then
    top="${core#rtft::}"
    top="${top%%[^A-Za-z0-9_]*}"
    if [[ -n "${top}" ]] && grep -qw -e "${top}" <<<"${public_text}"; then
      rtft_count=$((rtft_count + 1))
      exported+=("${core}")
    else
      echo "FAIL: internal symbol exported (not declared in ${include_dir}): ${line}"
      bad=1
    fi
    continue
  fi
  # Weak (W/V) or unique (u) template instantiations from the standard library.
  if [[ "${type}" =~ ^[WVu]$ && "${core}" =~ (^|[[:space:]])(std|__gnu_cxx):: ]]; then
    tolerated+=("${line}")
    continue
  fi
  echo "FAIL: symbol outside namespace rtft exported: ${line}"
  bad=1
done

if ((${#tolerated[@]} > 0)); then
  echo "tolerated (${#tolerated[@]} standard-library template instantiations):"
  printf '  %s\n' "${tolerated[@]}"
fi

# Entry points that the public headers promise; a lost RTFT_EXPORT drops them.
for want in "rtft::Status::ToString" "rtft::StatusCodeName" "rtft::DTypeName" \
  "rtft::ValidateDescription" "rtft::CompositeProvider::Describe" "rtft::StateProvider" \
  "rtft::TensorDesc::elements" "rtft_last_error" "rtft_protector_run" "rtft_ckpt_restore"; do
  found=0
  for e in "${exported[@]}"; do
    [[ "${e}" == "${want}"* ]] && found=1 && break
  done
  ((found)) || {
    echo "FAIL: public entry point not exported: ${want}"
    bad=1
  }
done

((bad == 0)) || exit 1
echo "PASS: ${rtft_count} rtft symbols and ${c_count} C API functions, all declared in public headers"
