#!/usr/bin/env bash
# No shell, ever: paths a user passes to the demo and to rtft-bench's plot reach the file system
# as they are, never a shell. A --dir holding a quote used to run "rm -rf '<dir>'" through
# std::system, so the rest of the path ran as commands.
# Usage: no_shell_test.sh EXAMPLE_01_CHECKPOINT RTFT_BENCH
set -u
demo=$1
bench=$2
tmp=$(mktemp -d "${RTFT_TEST_TMPDIR:-/var/tmp}/rtft-no-shell-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The quote closes the shell's string; "touch" would run, then "echo" swallows the rest.
dir="$tmp/demo'; touch '$tmp/pwned-demo'; echo '"
out=$(RTFT_CKPT_POOL_BYTES=4M RTFT_CKPT_CHUNK_BYTES=1M "$demo" --dir "$dir" --layers 1 --params-per-layer 4096 --steps 4 --every 2 2>&1)
rc=$?
[[ $rc -eq 0 ]] || { fail "demo exited $rc"; echo "$out"; }
[[ ! -e "$tmp/pwned-demo" ]] || fail "the demo's --dir ran a shell command"
[[ -f "$dir/LATEST" ]] || fail "the demo did not write into the directory named literally"
# Run again: the directory is emptied (removed) without a shell, and refilled.
RTFT_CKPT_POOL_BYTES=4M RTFT_CKPT_CHUNK_BYTES=1M "$demo" --dir "$dir" --layers 1 --params-per-layer 4096 --steps 4 --every 2 >/dev/null 2>&1 ||
  fail "the demo failed on its own earlier output"
[[ ! -e "$tmp/pwned-demo" ]] || fail "the demo's --dir ran a shell command"

# A file name cannot hold a '/', so this command works in the current directory.
plot="$tmp/plot'; touch pwned-plot; echo '.png"
out=$(cd "$tmp" && "$bench" ckpt --bytes 1M --tensors 2 --repeat 1 --dir "$tmp" --plot "$plot" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || { fail "rtft-bench exited $rc"; echo "$out"; }
[[ ! -e "$tmp/pwned-plot" ]] || fail "rtft-bench --plot ran a shell command"
[[ -f "${plot%.png}.jsonl" ]] || fail "rtft-bench did not write the JSON lines next to the plot"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: no shell in the demo or rtft-bench --plot"
