#!/usr/bin/env python3
"""A PMIx fence across many nodes, by simulation: a real `ddplaunch
--node-rank 0` hosts the job's store, and bench/sim_nodes plays the other
nodes, each over its own connection, running the agents' own fence as the
PMIx servers do for MPI_Init's exchange: up and down the tree of agents
(mpi/tree_fence.hpp), played along its deepest path, every link of the
path's nodes a real socket to a real store (sim_nodes.cpp says which).
Per N, record size and fan-out: the fence's time, from the first node's
entry to the last node holding every node's data.

    /usr/bin/python3 bench/fence.py [--build build] [--nodes 64 256 1024] [--bytes 2048]
                                    [--fanout 8]

With the simulator of a build whose fence is a star through node 0's store
(--build of 0bbfdfb), every node fences over its own connection to node 0.
"""
import argparse
import json
import os
import subprocess

from benchlib import free_port, raise_fds

HERE = os.path.dirname(os.path.abspath(__file__))


def one(build, nnodes, size, fanout):
    port = free_port()
    node0 = subprocess.Popen(
        [os.path.join(build, "ddplaunch"), "--nnodes", str(nnodes), "--node-rank", "0",
         "--nproc-per-node", "1", "--master-port", str(port),
         "--log-level", "error", "--", "sleep", "600"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=raise_fds)
    sim = subprocess.run([os.path.join(build, "bench", "sim_nodes"), str(port), str(nnodes), "1",
                          "sleep", "600"], capture_output=True, text=True, preexec_fn=raise_fds,
                         env=dict(os.environ, SIM_FENCE_BYTES=str(size),
                                   SIM_TREE_FANOUT=str(fanout)), timeout=900)
    node0.wait(timeout=60)
    if sim.returncode != 0:
        return f"| {nnodes} | {size:,} B | failed: {sim.stderr.strip()[-200:]} | |"
    r = json.loads(sim.stdout)
    total = size * nnodes
    shape = (f"fan-out {fanout}, {r['fence_height']} levels, {r['fence_links']} real links"
             if "fence_height" in r else "star")
    return (f"| {nnodes} | {size:,} B | {r['fence_s'] * 1000:.1f} ms | {shape} | "
            f"{total / 1024:,.0f} KiB |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--bytes", type=int, nargs="+", default=[2048])
    ap.add_argument("--fanout", type=int, nargs="+", default=[8])
    args = ap.parse_args()
    print("| nodes | record per node | fence | shape | result |")
    print("|---|---|---|---|---|")
    for n in args.nodes:
        for b in args.bytes:
            for f in args.fanout:
                print(one(args.build, n, b, f), flush=True)


if __name__ == "__main__":
    main()
