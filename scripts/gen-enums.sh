#!/usr/bin/env bash
# Makes the C and Fortran copies of rt-ft's enumerations from include/rtft/enum_list.h, the one
# place where each is declared (the C++ enums expand it directly): the constants of
# include/rtft/rtft.h and rtft_protect.h (each block in the header that has its markers), the parameters of include/rtft/rtft_c.f90 and the status table of
# docs/capi.md. Each copy sits between two marker lines; a ctest (capi_enum_copies) runs --check,
# so a copy edited by hand, or a list changed without --update, fails the tests.
#
#   scripts/gen-enums.sh --check    exit 1 (with a diff) if a copy differs from the list
#   scripts/gen-enums.sh --update   rewrite the copies in place
#
# RTFT_ENUM_LIST, RTFT_ENUM_C_HEADER (the C headers, space-separated), RTFT_ENUM_FORTRAN,
# RTFT_ENUM_DOC point it at other files.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
list="${RTFT_ENUM_LIST:-${root}/include/rtft/enum_list.h}"
read -r -a c_headers <<<"${RTFT_ENUM_C_HEADER:-${root}/include/rtft/rtft.h ${root}/include/rtft/rtft_protect.h}"
fortran="${RTFT_ENUM_FORTRAN:-${root}/include/rtft/rtft_c.f90}"
doc="${RTFT_ENUM_DOC:-${root}/docs/capi.md}"

# kind: the list's macro, the C type (empty: an anonymous enum), the C prefix, the sign of the C
# value (statuses are negative in C).
kinds=(status dtype reduce_op backend role run_outcome)
declare -A macro=([status]=STATUS_CODE [dtype]=DTYPE [reduce_op]=REDUCE_OP
  [backend]=COMM_BACKEND [role]=RUNTIME_ROLE [run_outcome]=RUN_OUTCOME)
declare -A ctype=([status]="" [dtype]=rtft_dtype [reduce_op]=rtft_reduce_op
  [backend]=rtft_backend [role]=rtft_role [run_outcome]=rtft_run_outcome)
declare -A prefix=([status]=RTFT_ [dtype]=RTFT_ [reduce_op]=RTFT_ [backend]=RTFT_BACKEND_
  [role]=RTFT_ROLE_ [run_outcome]=RTFT_RUN_)
declare -A sign=([status]=- [dtype]="" [reduce_op]="" [backend]="" [role]="" [run_outcome]="")

# The entries of one kind, one per line: NAME \x1f value \x1f text.
entries() {
  local m="${macro[$1]}" declared parsed
  declared="$(grep -cE "^RTFT_${m}\(" "${list}" || true)"
  if [[ "$1" == dtype ]]; then
    parsed="$(sed -nE "s/^RTFT_${m}\([A-Za-z0-9_]+, *([A-Z0-9_]+), *([0-9]+), *[0-9]+, *\"([^\"]*)\"\)$/\1\x1f\2\x1f\3/p" "${list}")"
  else
    parsed="$(sed -nE "s/^RTFT_${m}\([A-Za-z0-9_]+, *([A-Z0-9_]+), *([0-9]+), *\"([^\"]*)\"\)$/\1\x1f\2\x1f\3/p" "${list}")"
  fi
  if ((declared == 0)) || [[ "$(grep -c . <<<"${parsed}" || true)" != "${declared}" ]]; then
    echo "error: ${list}: ${declared} RTFT_${m} lines, $(grep -c . <<<"${parsed}" || true) parse;" \
      "keep each on one line as RTFT_${m}(id, NAME, value, ...\"text\")" >&2
    return 1
  fi
  printf '%s\n' "${parsed}"
}

c_block() {
  local k="$1" name value text parsed
  parsed="$(entries "${k}")"
  echo '/* clang-format off */'
  if [[ -n "${ctype[$k]}" ]]; then echo "typedef enum ${ctype[$k]} {"; else echo 'enum {'; fi
  while IFS=$'\x1f' read -r name value text; do
    [[ "${value}" == 0 ]] && v=0 || v="${sign[$k]}${value}"
    printf '  %s%s = %s, /* %s */\n' "${prefix[$k]}" "${name}" "${v}" "${text}"
  done <<<"${parsed}"
  if [[ -n "${ctype[$k]}" ]]; then echo "} ${ctype[$k]}_t;"; else echo '};'; fi
  echo '/* clang-format on */'
}

fortran_block() {
  local k name value text parsed
  for k in "${kinds[@]}"; do
    parsed="$(entries "${k}")"
    echo "  ! ${ctype[$k]:-rtft_status}_t"
    while IFS=$'\x1f' read -r name value text; do
      [[ "${value}" == 0 ]] && v=0 || v="${sign[$k]}${value}"
      printf '  integer(c_int), parameter :: %s%s = %s\n' "${prefix[$k]}" "${name}" "${v}"
    done <<<"${parsed}"
  done
}

doc_block() {
  local name value text parsed
  parsed="$(entries status)"
  echo '| status | value | what it tells the caller |'
  echo '|---|---|---|'
  while IFS=$'\x1f' read -r name value text; do
    [[ "${value}" == 0 ]] && v=0 || v="-${value}"
    printf '| `RTFT_%s` | %s | %s |\n' "${name}" "${v}" "${text//|/\\|}"
  done <<<"${parsed}"
}

# The lines strictly between BEGIN and END of FILE.
between() {
  awk -v b="$2" -v e="$3" '$0 == e {inside = 0} inside {print} $0 == b {inside = 1}' "$1"
}

# check|update FILE BEGIN END CONTENT
one() {
  local mode="$1" file="$2" begin="$3" end="$4" content="$5"
  if ! grep -qxF -e "${begin}" "${file}" || ! grep -qxF -e "${end}" "${file}"; then
    echo "FAIL: ${file} lacks the lines '${begin}' and '${end}'" >&2
    return 1
  fi
  if [[ "${mode}" == check ]]; then
    if ! diff -u <(between "${file}" "${begin}" "${end}") <(echo "${content}") \
      --label "${file} (copy)" --label "${list} (declared)"; then
      echo "FAIL: ${file}: the copy between '${begin}' and '${end}' is stale;" \
        "run scripts/gen-enums.sh --update" >&2
      return 1
    fi
  else
    local tmp
    tmp="$(mktemp "${file}.XXXXXX")"
    RTFT_BLOCK="${content}" awk -v b="${begin}" -v e="${end}" \
      '$0 == e {inside = 0} !inside {print} $0 == b {print ENVIRON["RTFT_BLOCK"]; inside = 1}' \
      "${file}" >"${tmp}"
    chmod --reference="${file}" "${tmp}"
    mv "${tmp}" "${file}"
  fi
}

# The C header that holds the markers of block BEGIN (the first one; the first header if none).
header_of() {
  local h
  for h in "${c_headers[@]}"; do
    if grep -qxF -e "$1" "${h}"; then
      echo "${h}"
      return
    fi
  done
  echo "${c_headers[0]}"
}

run() {
  local mode="$1" bad=0 k content begin
  for k in "${kinds[@]}"; do
    content="$(c_block "${k}")" || return 1
    begin="/* BEGIN generated: ${k} (scripts/gen-enums.sh) */"
    one "${mode}" "$(header_of "${begin}")" "${begin}" "/* END generated: ${k} */" "${content}" ||
      bad=1
  done
  content="$(fortran_block)" || return 1
  one "${mode}" "${fortran}" "  ! BEGIN generated: the enumerations (scripts/gen-enums.sh)" \
    "  ! END generated" "${content}" || bad=1
  content="$(doc_block)" || return 1
  one "${mode}" "${doc}" "<!-- BEGIN generated: status table (scripts/gen-enums.sh) -->" \
    "<!-- END generated -->" "${content}" || bad=1
  return "${bad}"
}

case "${1:-}" in
  --check)
    run check || exit 1
    echo "PASS: the C, Fortran and docs copies of ${list} are current"
    ;;
  --update)
    run update
    echo "updated ${c_headers[*]}, ${fortran}, ${doc}"
    ;;
  *)
    echo "usage: $0 --check | --update" >&2
    exit 2
    ;;
esac
