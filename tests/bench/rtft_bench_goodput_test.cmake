# rtft-bench goodput end to end on small inputs (a few nodes, a few days, a high failure rate, so
# that it runs in well under a second): one "goodput" line per GPU count with the promised keys
# (ETTRs and lost_ratio in (0, 1], every input with a source), the sensitivity lines and their
# summary; the same seed gives the same lines; a measured file's figure names the file; bad
# flags and bad files exit 2; --plot writes the JSON lines next to the chart.
# Run by ctest as:
#   cmake -DBENCH=<rtft-bench> -DWORK_DIR=<dir> -P rtft_bench_goodput_test.cmake
cmake_minimum_required(VERSION 3.22)

function(fail msg)
  message(FATAL_ERROR "${msg}")
endfunction()

set(small --job-days 5 --jobs 2 --search-jobs 1 --failures-per-node-h 0.002)

# Runs rtft-bench goodput with ARGN; sets `out` in the caller, fails unless it exits `rc_wanted`.
function(run rc_wanted)
  execute_process(COMMAND ${BENCH} goodput ${ARGN}
    OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
  if(NOT rc EQUAL rc_wanted)
    fail("rtft-bench goodput ${ARGN} exited ${rc}, not ${rc_wanted}:\n${e}")
  endif()
  set(out "${o}" PARENT_SCOPE)
  set(err "${e}" PARENT_SCOPE)
endfunction()

function(check_number line key lo hi)
  string(JSON v ERROR_VARIABLE e GET "${line}" ${key})
  string(JSON t ERROR_VARIABLE e2 TYPE "${line}" ${key})
  if(e OR NOT t STREQUAL "NUMBER" OR v LESS lo OR v GREATER hi)
    fail("'${key}' is not a number in [${lo}, ${hi}]: ${line}")
  endif()
endfunction()

function(check_goodput line gpus)
  string(JSON g GET "${line}" gpus)
  if(NOT g EQUAL gpus)
    fail("expected gpus ${gpus}: ${line}")
  endif()
  foreach(key rtft_ettr restart_ettr lost_ratio)
    check_number("${line}" ${key} 0.000001 1)
    check_number("${line}" ${key}_sd 0 1)
  endforeach()
  check_number("${line}" mtbf_h 0.001 1000000)
  check_number("${line}" restart_interval_s 0.001 1e9)
  check_number("${line}" seed 7 7)
  check_number("${line}" jobs 2 2)
  foreach(input failures_per_node_h transient_fraction protect_overhead_pct rtft_detect_node_s
                rtft_protocol_s
                rtft_recover_node_s l3_write_gbps_per_gpu l3_load_gbps_per_gpu
                restart_detect_node_s relaunch_s startup_s spares repair_h)
    string(JSON src ERROR_VARIABLE e GET "${line}" inputs ${input} source)
    if(e OR src STREQUAL "")
      fail("input ${input} lacks a source: ${line}")
    endif()
    check_number("${line}" "inputs;${input};value" -1 1e9)
  endforeach()
endfunction()

file(MAKE_DIRECTORY ${WORK_DIR})
run(0 ${small} --gpus 64,128 --seed 7)
set(first "${out}")
# CMake lists split at ';', which the inputs' sources may hold: none is needed here.
string(REPLACE ";" "," flat "${out}")
string(REGEX MATCHALL "[^\n]+" lines "${flat}")
set(goodput_gpus "")
set(sensitivity 0)
set(summary "")
foreach(line IN LISTS lines)
  string(JSON name ERROR_VARIABLE e GET "${line}" name)
  if(e)
    fail("not a JSON object with a name: ${line}")
  endif()
  if(name STREQUAL "goodput")
    string(JSON g GET "${line}" gpus)
    check_goodput("${line}" ${g})
    list(APPEND goodput_gpus ${g})
  elseif(name STREQUAL "goodput_sensitivity")
    math(EXPR sensitivity "${sensitivity} + 1")
  elseif(name STREQUAL "goodput_sensitivity_summary")
    set(summary "${line}")
  else()
    fail("unexpected line: ${line}")
  endif()
endforeach()
if(NOT goodput_gpus STREQUAL "64;128")
  fail("expected goodput lines for 64 and 128 GPUs, got '${goodput_gpus}'")
endif()
string(JSON most ERROR_VARIABLE e GET "${summary}" most_sensitive)
string(JSON elastic ERROR_VARIABLE e2 GET "${summary}" most_elastic)
if(e OR e2 OR most STREQUAL "" OR elastic STREQUAL "" OR sensitivity LESS 20)
  fail("no sensitivity summary, or too few sweep lines (${sensitivity}): ${summary}")
endif()
if(NOT err MATCHES "failures_per_node_h = 0.002 1/\\(node h\\): command line")
  fail("the inputs and their sources are not on stderr:\n${err}")
endif()

# Deterministic for a seed.
run(0 ${small} --gpus 64,128 --seed 7)
if(NOT out STREQUAL first)
  fail("two runs with --seed 7 differ")
endif()

# A measured figure from a file names the file and line.
file(WRITE ${WORK_DIR}/protect.jsonl "{\"name\":\"protect\",\"overhead_pct\":1.25}\n")
run(0 ${small} --no-sweep --gpus 64 --protect-json ${WORK_DIR}/protect.jsonl)
string(REPLACE ";" "," flat "${out}")
string(JSON v GET "${flat}" inputs protect_overhead_pct value)
string(JSON src GET "${flat}" inputs protect_overhead_pct source)
if(NOT v EQUAL 1.25 OR NOT src MATCHES "protect.jsonl line 1")
  fail("the protect file's figure or source is wrong: ${v}, ${src}")
endif()

# The recovery simulation's protocol_s: the one-failure line at the largest agent count.
file(WRITE ${WORK_DIR}/sim.jsonl
  "{\"name\":\"recovery_sim\",\"agents\":4096,\"second_failure\":\"none\",\"protocol_s\":0.5}\n"
  "{\"name\":\"recovery_sim\",\"agents\":4096,\"second_failure\":\"100ms_after\",\"protocol_s\":9}\n"
  "{\"name\":\"recovery_sim\",\"agents\":1024,\"second_failure\":\"none\",\"protocol_s\":0.2}\n")
run(0 ${small} --no-sweep --gpus 64 --recovery-sim-json ${WORK_DIR}/sim.jsonl)
string(REPLACE ";" "," flat "${out}")
string(JSON v GET "${flat}" inputs rtft_protocol_s value)
string(JSON src GET "${flat}" inputs rtft_protocol_s source)
if(NOT v EQUAL 0.5 OR NOT src MATCHES "sim.jsonl line 1 .*4096 agents")
  fail("the recovery --sim file's protocol_s or source is wrong: ${v}, ${src}")
endif()
file(WRITE ${WORK_DIR}/bad_sim.jsonl
  "{\"name\":\"recovery_sim\",\"agents\":64,\"second_failure\":\"none\",\"protocol_s\":-1}\n")
run(2 ${small} --gpus 64 --recovery-sim-json ${WORK_DIR}/bad_sim.jsonl)
if(NOT err MATCHES "bad_sim.jsonl line 1: 'protocol_s' must be in")
  fail("a negative protocol_s must be refused with its line named:\n${err}")
endif()
run(2 ${small} --gpus 64 --recovery-sim-json ${WORK_DIR}/protect.jsonl)

# Bad configuration: exit 2 with a reason.
file(WRITE ${WORK_DIR}/bad.jsonl "{\"name\":\"protect\",\"overhead_pct\":\"high\"}\n")
run(2 ${small} --gpus 64 --protect-json ${WORK_DIR}/bad.jsonl)
if(NOT err MATCHES "bad.jsonl line 1: 'overhead_pct' must be a number")
  fail("a bad file must be refused with its line named:\n${err}")
endif()
run(2 ${small} --gpus 64 --step-s nan)
run(2 ${small} --gpus 64 --transient-fraction 2)
run(2 ${small} --gpus 100)
run(2 ${small} --gpus 64 --jobs 0)
run(2 ${small} --gpus 64 --recovery-json ${WORK_DIR})
run(2 ${small} --gpus 64 --no-such-flag)

# --plot: the JSON lines next to the chart (the chart itself needs matplotlib).
file(REMOVE ${WORK_DIR}/ettr.jsonl)
run(0 ${small} --gpus 64 --no-sweep --plot ${WORK_DIR}/ettr.png)
if(NOT EXISTS ${WORK_DIR}/ettr.jsonl)
  fail("--plot did not write ${WORK_DIR}/ettr.jsonl")
endif()
