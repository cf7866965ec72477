# rtft-bench ckpt end to end on a tiny state: stdout must be JSON lines, one per variant (raw,
# naive, rtft) and a summary, each with the keys the benchmark promises and measured (positive)
# bandwidths, the restore phase's included; --state gpu either runs or exits 2 with a reason; a
# bad flag exits 2; --keep keeps the last rt-ft run's version, which rtft-ckpt verifies.
# Run by ctest as:
#   cmake -DBENCH=<rtft-bench> -DCKPT=<rtft-ckpt> -DWORK_DIR=<dir> -P rtft_bench_ckpt_test.cmake
cmake_minimum_required(VERSION 3.22)

set(required name variant bytes tensors state blocking_s capture_gbps persist_gbps raw_gbps
    naive_gbps)

function(fail msg)
  message(FATAL_ERROR "${msg}")
endfunction()

# Checks the JSON lines in `out` for a state of `bytes` in `tensors` tensors.
function(check_lines out bytes tensors)
  string(REGEX MATCHALL "[^\n]+" lines "${out}")
  set(seen "")
  foreach(line IN LISTS lines)
    string(JSON variant ERROR_VARIABLE err GET "${line}" variant)
    if(err)
      fail("not a JSON object with a variant: ${line}")
    endif()
    list(APPEND seen ${variant})
    foreach(key IN LISTS required)
      string(JSON type ERROR_VARIABLE err TYPE "${line}" ${key})
      if(err)
        fail("${variant} line lacks '${key}': ${line}")
      endif()
    endforeach()
    string(JSON name GET "${line}" name)
    string(JSON b GET "${line}" bytes)
    string(JSON t GET "${line}" tensors)
    if(NOT name STREQUAL "ckpt" OR NOT b EQUAL bytes OR NOT t EQUAL tensors)
      fail("wrong name, bytes or tensors: ${line}")
    endif()
    foreach(key persist_gbps raw_gbps naive_gbps blocking_s)
      string(JSON v GET "${line}" ${key})
      if(NOT v GREATER 0)
        fail("${key} is not positive: ${line}")
      endif()
    endforeach()
    if(variant STREQUAL "rtft" OR variant STREQUAL "summary")
      foreach(key raw_read_gbps restore_gbps)
        string(JSON v ERROR_VARIABLE err GET "${line}" ${key})
        if(err OR NOT v GREATER 0)
          fail("${variant} line lacks a positive '${key}': ${line}")
        endif()
      endforeach()
      foreach(key restore_device_gbps raw_read_before_device_gbps)
        string(JSON type ERROR_VARIABLE err TYPE "${line}" ${key})
        if(err)
          fail("${variant} line lacks '${key}': ${line}")
        endif()
      endforeach()
    endif()
    if(variant STREQUAL "summary")
      # The host restore against the raw read right before it, a ratio of two real reads.
      string(JSON v ERROR_VARIABLE err GET "${line}" restore_over_raw_read)
      if(err OR NOT v GREATER 0)
        fail("summary lacks a positive 'restore_over_raw_read': ${line}")
      endif()
    endif()
    if(variant STREQUAL "summary")
      foreach(key persist_ge_95pct_raw blocking_lt_2pct_naive
                  restore_ge_90pct_raw_read)
        string(JSON type ERROR_VARIABLE err TYPE "${line}" targets ${key})
        if(err OR NOT type STREQUAL "BOOLEAN")
          fail("summary lacks targets.${key}: ${line}")
        endif()
      endforeach()
    endif()
  endforeach()
  if(NOT seen STREQUAL "raw;naive;rtft;summary")
    fail("expected raw, naive, rtft and summary lines, got '${seen}'")
  endif()
endfunction()

file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${BENCH} ckpt --bytes 8M --tensors 16 --repeat 1 --dir ${WORK_DIR}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  fail("rtft-bench ckpt exited ${rc}:\n${err}")
endif()
check_lines("${out}" 8388608 16)

execute_process(COMMAND ${BENCH} ckpt --state gpu --bytes 8M --tensors 4 --repeat 1
                        --dir ${WORK_DIR}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0)
  check_lines("${out}" 8388608 4)
elseif(NOT rc EQUAL 2 OR NOT err MATCHES "--state gpu")
  fail("--state gpu without a usable GPU must exit 2 with a reason; got ${rc}:\n${err}")
endif()

execute_process(COMMAND ${BENCH} ckpt --no-such-flag
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2)
  fail("an unknown flag must exit 2; got ${rc}")
endif()

file(GLOB leftovers ${WORK_DIR}/rtft-bench-*)
if(leftovers)
  fail("scratch directories were not removed: ${leftovers}")
endif()

# --keep: the files of the last rt-ft run stay, a complete version that verifies.
execute_process(COMMAND ${BENCH} ckpt --bytes 4M --tensors 4 --repeat 2 --dir ${WORK_DIR} --keep
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  fail("rtft-bench ckpt --keep exited ${rc}:\n${err}")
endif()
file(GLOB kept ${WORK_DIR}/rtft-bench-*)
list(LENGTH kept n)
if(NOT n EQUAL 1 OR NOT EXISTS ${kept}/rtft/LATEST OR
   NOT EXISTS ${kept}/rtft/v000000000001/rank-00000.h5)
  fail("--keep did not keep the last rt-ft run's version: '${kept}'")
endif()
execute_process(COMMAND ${CKPT} verify ${kept}/rtft
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  fail("the kept version does not verify: ${out}${err}")
endif()
file(REMOVE_RECURSE ${kept})
