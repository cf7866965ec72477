#!/usr/bin/env bash
# rtft-ckpt end to end: exit codes, ls marking LATEST, verify catching a flipped byte, dump
# printing JSON, cat printing the saved values. Usage: rtft_ckpt_test.sh RTFT_CKPT MAKE_CHECKPOINT
set -u
ckpt=$1
make=$2
tmp=$(mktemp -d "${RTFT_TEST_TMPDIR:-/var/tmp}/rtft-ckpt-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- COMMAND...: runs COMMAND, checks its exit status and that its combined
# output matches the extended regular expression PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]]; then fail "'$*' exited $rc, wanted $code; output:"; echo "$out"; return; fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then fail "'$*' output lacks /$pattern/:"; echo "$out"; fi
}

"$make" "$tmp/good" || { echo "FAIL: make-test-checkpoint"; exit 1; }
"$make" "$tmp/bad" --flip model/w || { echo "FAIL: make-test-checkpoint --flip"; exit 1; }
r0=$tmp/good/v000000000002/rank-00000.h5
r1=$tmp/good/v000000000002/rank-00001.h5

# ls: every version, LATEST on version 2's line, version 3 incomplete.
expect 0 '^2 +complete +2 .*v000000000002 +<- LATEST$' -- "$ckpt" ls "$tmp/good"
expect 0 '^1 +complete +2 ' -- "$ckpt" ls "$tmp/good"
expect 0 '^3 +incomplete +2/\? ' -- "$ckpt" ls "$tmp/good"
expect 1 '^rtft-ckpt: .*nowhere' -- "$ckpt" ls "$tmp/nowhere"
# The writer marked nothing (docs/format.md, "Certification"): column COPIES says "-".
expect 0 '^2 +complete +2 .* - +/' -- "$ckpt" ls "$tmp/good"

# verify: 0 only when everything verified.
expect 0 'version 2 of .*: OK' -- "$ckpt" verify "$tmp/good"
expect 0 'version 1 of .*: OK' -- "$ckpt" verify "$tmp/good" --version 1
expect 0 '^version 2: replicated copies not compared by the writer; its compute not replayed$' -- \
  "$ckpt" verify "$tmp/good"
expect 1 '^rtft-ckpt: .*incomplete' -- "$ckpt" verify "$tmp/good" --version 3
expect 1 "^rtft-ckpt: tensor 'model/w' in .*rank-00000.h5: checksum mismatch in chunk 0" -- \
  "$ckpt" verify "$tmp/bad"
expect 0 'OK' -- "$ckpt" verify "$tmp/bad" --version 1
expect 1 '^rtft-ckpt: .*does not exist|^rtft-ckpt: .*No such file' -- "$ckpt" verify "$tmp/nowhere"
expect 2 '' -- "$ckpt" verify
expect 2 '' -- "$ckpt" frobnicate
expect 2 '' -- "$ckpt" verify "$tmp/good" --version notanumber
expect 0 'verify' -- "$ckpt" --help

# dump: the manifest as JSON (checked by a JSON parser where python3 exists).
expect 0 '"format": "rt-ft checkpoint"' -- "$ckpt" dump "$r0"
expect 0 '"name": "opt/m"' -- "$ckpt" dump "$r1"
expect 0 '"world_size": 2' -- "$ckpt" dump "$tmp/good/v000000000002/MANIFEST.json"
if command -v python3 >/dev/null; then
  "$ckpt" dump "$r0" | python3 -c 'import json,sys; m=json.load(sys.stdin); assert m["rank"] == 0' ||
    fail "dump output is not the JSON manifest"
fi
printf 'not a checkpoint\n' >"$tmp/text.h5"
expect 1 '^rtft-ckpt: .*not an rt-ft checkpoint' -- "$ckpt" dump "$tmp/text.h5"

# cat: the values, the last dimension on one line.
expect 0 '^1.5 -2 3$' -- "$ckpt" cat "$r0" model/w
expect 0 '^4 5 6.25$' -- "$ckpt" cat "$r0" model/w
expect 0 '^1 -2 3.140625 0$' -- "$ckpt" cat "$r0" model/h
expect 0 '^1 -2.5$' -- "$ckpt" cat "$r0" model/f16
expect 0 '^42$' -- "$ckpt" cat "$r0" step
expect 0 '^4 5 6 7$' -- "$ckpt" cat "$r1" opt/m
expect 0 'at \[4\] of \[8\]' -- "$ckpt" cat "$r1" opt/m
expect 0 '^4 5$' -- "$ckpt" cat "$r1" opt/m --limit 2
expect 0 '2 more values' -- "$ckpt" cat "$r1" opt/m --limit 2
expect 1 "^rtft-ckpt: tensor 'nope' is not in" -- "$ckpt" cat "$r0" nope
expect 1 "checksum mismatch" -- "$ckpt" cat "$tmp/bad/v000000000002/rank-00000.h5" model/w

# float64: printed as doubles in their shortest exact form (a float32 detour would print
# 0.30000000000000004 as 0.3 and 1e-300 as 0), in format-version-2 files that verify.
"$make" "$tmp/f64" --float64 || { echo "FAIL: make-test-checkpoint --float64"; exit 1; }
f0=$tmp/f64/v000000000001/rank-00000.h5
f1=$tmp/f64/v000000000001/rank-00001.h5
expect 0 '^# solver/u float64 \[2, 3\] at \[0, 0\] of \[4, 3\]$' -- "$ckpt" cat "$f0" solver/u
expect 0 '^0\.1 -2\.5 1e-300$' -- "$ckpt" cat "$f0" solver/u
expect 0 '^3\.141592653589793 -0 5e-324$' -- "$ckpt" cat "$f0" solver/u
expect 0 '^1\.7976931348623157e\+308 0\.30000000000000004 -1234567\.890625$' -- \
  "$ckpt" cat "$f1" solver/u
expect 0 '^2\.5 inf -inf$' -- "$ckpt" cat "$f1" solver/u
expect 0 '^0\.001$' -- "$ckpt" cat "$f1" solver/dt
expect 0 '^0\.1 -2\.5$' -- "$ckpt" cat "$f0" solver/u --limit 2
expect 0 '"dtype": "float64"' -- "$ckpt" dump "$f0"
expect 0 '"format_version": 2' -- "$ckpt" dump "$f0"
expect 0 '"format_version": 2' -- "$ckpt" dump "$tmp/f64/v000000000001/MANIFEST.json"
expect 0 '"format_version": 1' -- "$ckpt" dump "$r0"
expect 0 'version 1 of .*: OK' -- "$ckpt" verify "$tmp/f64"
expect 0 '^1 +complete +2 ' -- "$ckpt" ls "$tmp/f64"

# cat streams: only the chunks holding the values shown are read, so a reader limited to far
# less memory than the tensor prints its first values (it used to allocate the whole tensor).
"$make" "$tmp/big" --big $((160 << 20)) || { echo "FAIL: make-test-checkpoint --big"; exit 1; }
rb=$tmp/big/v000000000001/rank-00000.h5
expect 0 '^0 1 2 3$' -- "$ckpt" --memory-limit 128M cat "$rb" big --limit 4
expect 0 'OK' -- "$ckpt" --memory-limit 128M verify "$tmp/big"

# dump of a manifest nested 100000 deep is refused at once (it used to grow quadratically until
# the allocator gave up).
mkdir -p "$tmp/deep/v000000000001"
{ printf '{"format":"rt-ft checkpoint","format_version":1,"x":'; head -c 100000 /dev/zero | tr '\0' '['; } \
  >"$tmp/deep/v000000000001/MANIFEST.json"
expect 1 'nests deeper than 8 levels' -- timeout 20 "$ckpt" --memory-limit 256M dump \
  "$tmp/deep/v000000000001/MANIFEST.json"

# Special files in place of checkpoint files are refused at once (they used to block forever on
# a FIFO): `timeout` turns a hang into exit 124.
cp -r "$tmp/good" "$tmp/fifo"
rm "$tmp/fifo/LATEST" && mkfifo "$tmp/fifo/LATEST"
expect 0 '^2 +complete' -- timeout 20 "$ckpt" ls "$tmp/fifo"
expect 1 'LATEST is a FIFO, not a regular file' -- timeout 20 "$ckpt" verify "$tmp/fifo"
rm "$tmp/fifo/v000000000002/MANIFEST.json" && mkfifo "$tmp/fifo/v000000000002/MANIFEST.json"
expect 0 '^2 +incomplete' -- timeout 20 "$ckpt" ls "$tmp/fifo"
expect 1 'MANIFEST.json is a FIFO' -- timeout 20 "$ckpt" verify "$tmp/fifo" --version 2
expect 1 'MANIFEST.json is a FIFO' -- timeout 20 "$ckpt" dump "$tmp/fifo/v000000000002/MANIFEST.json"
f=$tmp/fifo/v000000000001/rank-00000.h5
rm "$f" && mkfifo "$f"
expect 1 'rank-00000.h5 is a FIFO' -- timeout 20 "$ckpt" verify "$tmp/fifo" --version 1
expect 1 'rank-00000.h5 is a FIFO' -- timeout 20 "$ckpt" dump "$f"
expect 1 'rank-00000.h5 is a FIFO' -- timeout 20 "$ckpt" cat "$f" model/w

# A reader that dies or hangs inside a file (a crafted file crashing libhdf5; here a named fault
# point does it) ends only its child process: reported as a damaged file, never a crash or a
# hang of rtft-ckpt.
RTFT_FAULT=ckpt.read_manifest:kill expect 1 \
  'rank-0000[01].h5 is damaged: reading it crashed the reader \(signal 9' -- "$ckpt" dump "$r0"
RTFT_FAULT=ckpt.read_manifest:kill expect 1 'is damaged: reading it crashed the reader' -- \
  "$ckpt" verify "$tmp/good"
RTFT_FAULT=ckpt.read_manifest:hang expect 1 'did not finish within 1 s' -- \
  timeout 20 "$ckpt" --time-limit 1 cat "$r0" model/w
expect 1 'ran out of its 1.0 MiB of memory|cannot' -- "$ckpt" --memory-limit 1M dump "$r0"

# config: the settings table.
expect 0 '^RTFT_CKPT_POOL_BYTES +' -- "$ckpt" config
RTFT_CKPT_IO_DEPTH=7 expect 0 '^RTFT_CKPT_IO_DEPTH +7 +16 ' -- "$ckpt" config

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all rtft-ckpt checks passed"
