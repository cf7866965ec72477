#!/usr/bin/env python3
"""Runs `rtft-bench comm --sim` at 8 and 32 ranks and checks the Gloo rendezvous's store traffic
against docs/comm.md ("Gloo at scale"): with every pair connected at creation, N-1 records put
and read per rank; with the ring's pairs, two at creation and the barrier's partners at the
first barrier, whatever N; and the bytes each rank reads stay flat with the ring."""
import json
import subprocess
import sys

bench = sys.argv[1]
out = subprocess.run([bench, "comm", "--sim", "--sim-ranks", "8,32", "--rounds", "1"],
                     check=True, capture_output=True, text=True).stdout
lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
got = {(l["pairs"], l["ranks"]): l for l in lines if l.get("name") == "comm_rendezvous"}
assert set(got) == {("all", 8), ("all", 32), ("ring", 8), ("ring", 32)}, got.keys()


def partners(n):
    """Rank 0's peers once the first barrier is done: its neighbours and r +- 2^k."""
    p = {1 % n, n - 1}
    d = 1
    while d < n:
        p |= {d % n, (n - d) % n}
        d *= 2
    p.discard(0)
    return len(p)


for (pairs, n), l in got.items():
    for field in ("create_s", "first_barrier_s", "create_puts_per_rank", "create_gets_per_rank",
                  "create_bytes_read_per_rank", "puts_per_rank", "gets_per_rank",
                  "bytes_read_per_rank", "store_records", "store_bytes"):
        assert field in l, (pairs, n, field)
    assert l["create_s"] > 0 and l["first_barrier_s"] > 0, l
    if pairs == "all":
        assert l["create_puts_per_rank"] == n - 1 and l["create_gets_per_rank"] == n - 1, l
        assert l["puts_per_rank"] == n - 1, l  # the barrier connects nothing more
        assert l["store_records"] == n * (n - 1), l
    else:
        assert l["create_puts_per_rank"] == 2 and l["create_gets_per_rank"] == 2, l
        assert l["puts_per_rank"] == partners(n), (l, partners(n))
        assert l["store_records"] == n * partners(n), l
# One record is a few hundred bytes: a ring's creation reads two of them at any N, a mesh's
# grows with N.
ring8, ring32 = got[("ring", 8)], got[("ring", 32)]
mesh32 = got[("all", 32)]
assert 200 < ring8["create_bytes_read_per_rank"] < 1000, ring8
assert abs(ring32["create_bytes_read_per_rank"] - ring8["create_bytes_read_per_rank"]) < 100
assert mesh32["create_bytes_read_per_rank"] > 10 * ring32["create_bytes_read_per_rank"], mesh32
print("comm --sim: the rendezvous's store traffic as documented")
