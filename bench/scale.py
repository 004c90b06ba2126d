#!/usr/bin/env python3
"""Rendezvous at scale, by simulation: a real `ddplaunch --node-rank 0` (the
store host, with 8 real workers) and nodes 1..N-1 played by bench/sim_nodes
in one process, each the agents' own MemberLink over its own connection.

    /usr/bin/python3 bench/scale.py [--build build] [--nodes 1024 4096 16384] [--nproc 8]

Per N: rendezvous time (first join to the last node's plan), node 0's peak
RSS (VmHWM: the store and the agent), CPU time (user + system, the whole
run) and the fds it held at the end of rendezvous (/proc/PID/fd), and failure
propagation (node 1 publishes a stop with exit 7: until every simulated node
has the verdict, and node 0's exit code). Each agent holds one connection
(store protocol 5), so N nodes need about N fds in each process.
"""
import argparse
import json
import os
import resource
import subprocess
import tempfile

from benchlib import free_port, raise_fds

HERE = os.path.dirname(os.path.abspath(__file__))




def one(build, nnodes, nproc):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nnodes + 256 > hard:
        return f"| {nnodes} x {nproc} | not run: needs about {nnodes} fds per process, the hard limit is {hard} | | | | | |"
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "s.json")
        err_path = os.path.join(tmp, "node0.err")
        with open(err_path, "w") as err_file:
            node0 = subprocess.Popen(
                [os.path.join(build, "ddplaunch"), "--nnodes", str(nnodes), "--node-rank", "0",
                 "--nproc-per-node", str(nproc), "--master-port", str(port), "--heartbeat-timeout", "600",
                 "--log-level", "error", "--summary-json", summary, "--", "sleep", "600"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                preexec_fn=raise_fds)
        sim = subprocess.Popen([os.path.join(build, "bench", "sim_nodes"), str(port), str(nnodes),
                                str(nproc), "sleep", "600"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=raise_fds)
        # node 0's fds once every node has joined: sim_nodes says so on stderr.
        fds = None
        for line in sim.stderr:
            if line.startswith("joined"):
                fds = len(os.listdir(f"/proc/{node0.pid}/fd"))
                break
        out, err = sim.communicate(timeout=900)
        if sim.returncode != 0:
            node0.kill()
        _, status, usage = os.wait4(node0.pid, 0)
        node0.returncode = os.waitstatus_to_exitcode(status)
        if sim.returncode != 0:
            with open(err_path) as f:
                node0_err = f.read()
            return f"| {nnodes} x {nproc} | failed: {err.strip()[-200:]} {node0_err[-200:]} | | | | | |"
        r = json.loads(out)
        with open(summary) as f:
            rss = json.load(f)["launcher_max_rss_kib"] / 1024
        cpu = usage.ru_utime + usage.ru_stime
        return (f"| {nnodes} x {nproc} ({nnodes * nproc:,} ranks) | {r['joined_s']:.2f} s | {rss:.1f} MiB "
                f"| {cpu:.2f} s | {fds:,} | {r['verdict_s'] * 1000:.0f} ms (exit {r['verdict_code']}) | {node0.returncode} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--nproc", type=int, default=8)
    args = ap.parse_args()
    print("| nodes x workers | rendezvous | node 0 peak RSS | node 0 CPU | node 0 fds | stop reaches every node | node 0 exit |")
    print("|---|---|---|---|---|---|---|")
    for n in args.nodes:
        print(one(args.build, n, args.nproc), flush=True)


if __name__ == "__main__":
    main()
