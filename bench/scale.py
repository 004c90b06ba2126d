#!/usr/bin/env python3
"""Rendezvous at scale, by simulation: a real `ddplaunch --node-rank 0` (the
store host, with 8 real workers) and nodes 1..N-1 played by bench/sim_nodes
in one process over the real protocol.

    /usr/bin/python3 bench/scale.py [--build build] [--nodes 1024 4096 16384] [--nproc 8]

Per N: rendezvous time (first join to the last node's plan), node 0's peak
RSS (VmHWM: the store and the agent), and failure propagation (node 1
publishes a stop with exit 7: until every simulated node has the verdict, and
node 0's exit code). Each simulated node holds three connections, as an agent
does, so N nodes need about 3N fds in each process: N is skipped, and says
so, where the fd hard limit is too low.
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_fds():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def one(build, nnodes, nproc):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if 3 * nnodes + 256 > hard:
        return f"| {nnodes} x {nproc} | not run: needs about {3 * nnodes} fds per process, the hard limit is {hard} | | | |"
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "s.json")
        node0 = subprocess.Popen(
            [os.path.join(build, "ddplaunch"), "--nnodes", str(nnodes), "--node-rank", "0",
             "--nproc-per-node", str(nproc), "--master-port", str(port), "--heartbeat-timeout", "300",
             "--log-level", "error", "--summary-json", summary, "--", "sleep", "600"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=raise_fds)
        sim = subprocess.run([os.path.join(build, "bench", "sim_nodes"), str(port), str(nnodes),
                              str(nproc), "sleep 600", "--fail"],
                             capture_output=True, text=True, timeout=900, preexec_fn=raise_fds)
        try:
            _, err = node0.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            node0.kill()
            _, err = node0.communicate()
        if sim.returncode != 0:
            return f"| {nnodes} x {nproc} | failed: {sim.stderr.strip()[-200:]} | | | |"
        r = json.loads(sim.stdout)
        with open(summary) as f:
            rss = json.load(f)["launcher_max_rss_kib"] / 1024
        return (f"| {nnodes} x {nproc} ({nnodes * nproc:,} ranks) | {r['joined_s']:.2f} s | {rss:.0f} MiB "
                f"| {r['verdict_s'] * 1000:.0f} ms (exit {r['verdict_code']}) | {node0.returncode} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--nproc", type=int, default=8)
    args = ap.parse_args()
    print("| nodes x workers | rendezvous | node 0 peak RSS | stop reaches every node | node 0 exit |")
    print("|---|---|---|---|---|")
    for n in args.nodes:
        print(one(args.build, n, args.nproc), flush=True)


if __name__ == "__main__":
    main()
