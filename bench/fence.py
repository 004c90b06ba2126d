#!/usr/bin/env python3
"""A PMIx fence across many nodes, by simulation: a real `ddplaunch
--node-rank 0` hosts the store, and bench/sim_nodes plays nodes 1..N-1, each
running the agents' own fence (mpi/fence.hpp: a record, a count, a parked
wait, one MULTI_GET) over its own connection, as the PMIx servers of N-1
nodes do for MPI_Init's exchange. Per N and record size: the fence's time,
from the first node's entry to the last node holding every node's data.

    /usr/bin/python3 bench/fence.py [--build build] [--nodes 64 256 1024] [--bytes 2048]

Each node makes six requests whatever N (the unit test counts them: four
for the fence, two to delete its record and count itself out); the bytes
each node reads grow with N (an allgather: every node gets all data).
"""
import argparse
import json
import os
import subprocess

from benchlib import free_port, raise_fds

HERE = os.path.dirname(os.path.abspath(__file__))


def one(build, nnodes, size):
    port = free_port()
    node0 = subprocess.Popen(
        [os.path.join(build, "ddplaunch"), "--nnodes", str(nnodes), "--node-rank", "0",
         "--nproc-per-node", "1", "--master-port", str(port),
         "--log-level", "error", "--", "sleep", "600"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=raise_fds)
    sim = subprocess.run([os.path.join(build, "bench", "sim_nodes"), str(port), str(nnodes), "1",
                          "sleep", "600"], capture_output=True, text=True, preexec_fn=raise_fds,
                         env=dict(os.environ, SIM_FENCE_BYTES=str(size)), timeout=900)
    node0.wait(timeout=60)
    if sim.returncode != 0:
        return f"| {nnodes} | {size:,} B | failed: {sim.stderr.strip()[-200:]} | |"
    r = json.loads(sim.stdout)
    total = size * (nnodes - 1)
    return (f"| {nnodes} | {size:,} B | {r['fence_s'] * 1000:.1f} ms | "
            f"{total / 1024:,.0f} KiB to each node |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--bytes", type=int, nargs="+", default=[2048])
    args = ap.parse_args()
    print("| nodes | record per node | fence | data each node reads |")
    print("|---|---|---|---|")
    for n in args.nodes:
        for b in args.bytes:
            print(one(args.build, n, b), flush=True)


if __name__ == "__main__":
    main()
