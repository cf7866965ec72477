#!/usr/bin/env python3
"""Runs `rtft-bench recovery --sim` on a small job and checks its JSON lines: one per case,
every field present and consistent (a delta event, every rank done, the gather aborted when a
second failure comes during it, each rank's Gloo ring records put and read), each of the three
cases within its targets."""
import json
import subprocess
import sys

bench = sys.argv[1]
out = subprocess.run([bench, "recovery", "--sim", "--agents", "64", "--repeats", "1"],
                     check=True, capture_output=True, text=True).stdout
lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
by_case = {l["second_failure"]: l for l in lines if l.get("name") == "recovery_sim"}
assert set(by_case) == {"none", "100ms_after", "during_gather"}, by_case.keys()
for case, l in by_case.items():
    for field in ("agents", "ranks", "announce_s", "protocol_s", "bytes_sent_per_agent",
                  "bytes_received_per_agent", "bytes_sent_max", "bytes_received_max",
                  "event_bytes", "failures", "epochs", "aborted_answers", "met"):
        assert field in l, (case, field)
    assert l["agents"] == 64 and l["ranks"] == 62, l
    assert 0 < l["announce_s"] <= l["protocol_s"], l
    # A delta, not the whole membership (which is about 200 bytes per 64 slots).
    assert 0 < l["event_bytes"] < 400, l
    # One state out, a plan and the training key back, then two Gloo rings' records (two puts
    # of about 400 bytes and two gets each): a few KB, not the world's.
    assert l["comm_keys"] == 1 and l["gloo_rings"] == 2, l
    # (per epoch: the second failure of case two comes after the first epoch's protocol ended)
    assert 4 * 360 < l["bytes_sent_per_agent"] < 4000 * l["epochs"], l
    assert 4 * 360 < l["bytes_received_per_agent"] < 4000 * l["epochs"], l
    # The leader receives every rank's state.
    assert l["bytes_received_max"] > 62 * 50, l
    assert l["met"], l
assert by_case["none"]["failures"] == 1 and by_case["none"]["epochs"] == 1
assert by_case["none"]["aborted_answers"] == 0
# The coordinator's side of the announcement: it decides after the report, hands every copy of
# the event to ZeroMQ after deciding, and no agent sees the epoch before the decision.
none = by_case["none"]
assert 0 <= none["decided_s"] <= none["handed_s"], none
assert none["decided_s"] < none["announce_s"], none
assert by_case["during_gather"]["epochs"] == 2
assert by_case["during_gather"]["aborted_answers"] > 0, by_case["during_gather"]
print("recovery --sim: all fields present and within targets")
