#!/usr/bin/env python3
"""The network preflight's cost: N agents on loopback (default 64), each
with one worker (/bin/true), with and without --no-preflight, alternating.

    /usr/bin/python3 bench/preflight.py [--build build] [--nodes 64] [--repeat 7]

Per run: the job's wall time (the first agent started to the last agent's
exit) and node 0's own measure of the preflight (its debug line: from the
plan published to every node's report in). Reported: medians, and the
difference the preflight adds. Every agent probes its peers (all of them up
to 17 nodes; 16 plus a sample of 1 per doubling beyond) and node 0's
MASTER_PORT, so 64 agents make 64 x 18 connects on one host.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

from benchlib import free_port, raise_fds

HERE = os.path.dirname(os.path.abspath(__file__))


def one(build, nnodes, preflight):
    port = free_port()
    base = [os.path.join(build, "ddplaunch"), "--nnodes", str(nnodes), "--nproc-per-node", "1",
            "--master-port", str(port), "--no-pmix", "--rdzv-timeout", "120"]
    if not preflight:
        base.append("--no-preflight")
    start = time.perf_counter()
    node0 = subprocess.Popen(base + ["--node-rank", "0", "--log-level", "debug", "--", "true"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, preexec_fn=raise_fds)
    others = [subprocess.Popen(base + ["--node-rank", str(n), "--log-level", "error", "--", "true"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
              for n in range(1, nnodes)]
    _, err = node0.communicate(timeout=300)
    codes = [node0.returncode] + [p.wait(timeout=300) for p in others]
    wall = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"a node failed ({codes}): {err[-2000:]}")
    m = re.search(r"network preflight: every path is open \(\d+ nodes, (\d+) ms\)", err)
    return wall, (int(m.group(1)) if m else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    one(a.build, a.nodes, True)  # warm-up
    walls = {True: [], False: []}
    inner = []
    for _ in range(a.repeat):
        for preflight in (True, False):
            wall, ms = one(a.build, a.nodes, preflight)
            walls[preflight].append(wall)
            if preflight and ms is not None:
                inner.append(ms)
    on = statistics.median(walls[True]) * 1000
    off = statistics.median(walls[False]) * 1000
    print(f"| agents | job with preflight | with --no-preflight | added | ratio | "
          f"node 0's preflight (plan to go) |")
    print("|---|---|---|---|---|---|")
    print(f"| {a.nodes} | {on:.0f} ms | {off:.0f} ms | {on - off:+.0f} ms | {on / off:.2f}x | "
          f"{statistics.median(inner):.0f} ms (min {min(inner)}, max {max(inner)}) |")


if __name__ == "__main__":
    main()
