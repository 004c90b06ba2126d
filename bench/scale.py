#!/usr/bin/env python3
"""Rendezvous at scale, by simulation: a real `ddplaunch --node-rank 0` (the
store host, with 8 real workers) and nodes 1..N-1 played by bench/sim_nodes
in one process, each the agents' own MemberLink over its own connection.

    /usr/bin/python3 bench/scale.py [--build build] [--nodes 1024 4096 16384] [--nproc 8]
                                    [--hold 5] [--sim PATH]

Node 0 runs with the defaults a user gets (the network preflight on), and
each simulated node answers the preflight as an agent does (its own probe
listener, its connects to its peers, its report). Per N, twice: as started
by default, then with --no-preflight; the difference is the preflight's own
cost. Columns: rendezvous time (the first join to the last node's start,
the preflight included), node 0's peak RSS (VmHWM: the store and the
agent), CPU time (user + system: until every node runs, as /proc says once
the simulator has seen the last node's plan, and the whole run but the
--hold seconds) and the fds it held at the end of rendezvous
(/proc/PID/fd), and failure propagation (node 1 publishes
a stop with exit 7: until every node reading node 0's store has the
verdict, which past 9 nodes is node 0's children, each then handing it to
its subtree in memory as the tree of agents does (bench/sim_nodes.cpp);
then until the one simulator process has handled it for every node; and
node 0's exit code). Each agent holds one connection to the store, and its
probe listener and the epoll of its connects: where the hard fd limit does
not allow all of them in one process, the nodes past it have no probe port,
as an agent short of descriptors has (the others do not probe them), and
the simulator says how many had one. If node 0 fails, the run stops and
the row says why. Before the stop the job runs 1 + --hold seconds, every
simulated node beating as agents do: node 0's CPU over the last --hold
seconds, as a share of one core, is its steady-state cost (heartbeats; past 9 nodes only
node 0's children beat on its store, the others on their parents'). --sim:
another build's simulator (side by side with a build whose own simulator
cannot hold the job; SIM_BEAT_TREE=0 in the environment makes every
simulated node beat on node 0's store, as agents did before).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import free_port, raise_fds

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 0




def cpu_seconds(pid):
    """User + system CPU of process `pid` so far (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(build, nnodes, nproc, preflight=True, hold=5.0, sim_path=None):
    """One row: node 0 as a user starts it (the network preflight on unless
    `preflight` is False) against nnodes - 1 simulated nodes. The run stops
    as soon as either side fails."""
    label = f"{nnodes} x {nproc} ({nnodes * nproc:,} ranks){'' if preflight else ', --no-preflight'}"
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nnodes + 1024 > limit:
        return f"| {label} | not run: node 0 and the simulator need about {nnodes + 1024} fds each, the hard limit is {limit} | | | | | | | | |"
    port = free_port()
    # A loopback address of the run's own: the last run's connections wait
    # in TIME_WAIT, and 16,384 new ones from one address to one port find
    # too few free ports among them.
    global RUNS
    RUNS += 1
    addr = f"127.0.{RUNS // 250}.{2 + RUNS % 250}"
    with tempfile.TemporaryDirectory() as tmp:
        err_path = os.path.join(tmp, "node0.err")
        with open(err_path, "w") as err_file:
            node0 = subprocess.Popen(
                [os.path.join(build, "ddplaunch"), "--nnodes", str(nnodes), "--node-rank", "0",
                 "--nproc-per-node", str(nproc), "--master-addr", addr, "--master-port", str(port),
                 *([] if preflight else ["--no-preflight"]), "--log-level", "error",
                 "--", "sleep", "600"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                preexec_fn=raise_fds)
        sim = subprocess.Popen([sim_path or os.path.join(build, "bench", "sim_nodes"), str(port),
                                str(nnodes), str(nproc), "sleep", "600"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "SIM_STORE_ADDR": addr,
                                    "SIM_HOLD_S": str(hold)}, preexec_fn=raise_fds)
        # Node 0 failing (a rendezvous error, a blocked path) ends the run:
        # the simulated nodes are stopped rather than left waiting.
        node0_gone = threading.Event()
        node0_usage = []

        def watch_node0():
            _, status, usage = os.wait4(node0.pid, 0)
            node0.returncode = os.waitstatus_to_exitcode(status)
            node0_usage.append(usage)
            node0_gone.set()
            if sim.poll() is None and node0.returncode != 7:
                sim.kill()

        watcher = threading.Thread(target=watch_node0, daemon=True)
        watcher.start()
        # node 0's fds once every node has joined: sim_nodes says so on stderr.
        fds, probes, steady, held_cpu, cpu_running = None, "?", None, 0.0, None
        held_from = None
        for line in sim.stderr:
            if line.startswith("progress: "):  # SIM_PROGRESS=1: each second, as it comes
                print(line, end="", file=sys.stderr, flush=True)
            if line.startswith("probes: "):
                probes = line.split(": ")[1].strip()
            if line.startswith("joined"):
                fds = len(os.listdir(f"/proc/{node0.pid}/fd"))
                cpu_running = cpu_seconds(node0.pid)
                if hold <= 0:
                    break
            if line.startswith("steady"):
                held_from = (time.monotonic(), cpu_seconds(node0.pid))
            if line.startswith("held") and held_from:
                span = time.monotonic() - held_from[0]
                held_cpu = cpu_seconds(node0.pid) - held_from[1]
                steady = held_cpu / span
                break
        out, err = sim.communicate(timeout=900)
        if sim.returncode != 0 and node0.poll() is None:
            node0.kill()
        watcher.join()
        with open(err_path) as f:
            node0_err = f.read()
        if sim.returncode != 0:
            why = node0_err.strip() if node0_gone.is_set() and node0.returncode != -9 else err.strip()
            # Node 0's own words, not its report of each worker it stopped.
            why = " ".join(l for l in why.splitlines() if "killed by signal" not in l)
            return f"| {label} | failed: {why[-300:]} | | | | | | | | |"
        r = json.loads(out)
        # Node 0's peak from its rusage (its workers are `sleep`): the line
        # runs as a user types it, with no --summary-json (which at 131,072
        # ranks costs node 0 about 0.35 s of CPU at the end, writing them).
        rss = node0_usage[0].ru_maxrss / 1024
        # The whole run but the hold (its own column).
        cpu = node0_usage[0].ru_utime + node0_usage[0].ru_stime - held_cpu
        if preflight:
            label += f" ({probes} simulated nodes probe)"
        # A simulator of a build before the verdict travelled the tree says
        # nothing more: every node read the store then.
        handled = (f"{r['verdict_handled_s'] * 1000:.1f} ms" if "verdict_handled_s" in r
                   else f"{r['verdict_s'] * 1000:.1f} ms")
        steady_text = f"{steady * 100:.1f}%" if steady is not None else "not held"
        return (f"| {label} | {r['joined_s']:.2f} s | {rss:.1f} MiB "
                f"| {cpu_running:.2f} s | {cpu:.2f} s | {steady_text} | {fds:,} "
                f"| {r['verdict_s'] * 1000:.1f} ms (exit {r['verdict_code']}) "
                f"| {handled} | {node0.returncode} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--defaults-only", action="store_true",
                    help="only the rows with the defaults")
    ap.add_argument("--hold", type=float, default=5.0,
                    help="seconds the job runs before the stop (node 0's steady-state CPU)")
    ap.add_argument("--sim", help="the simulator to use (default: the build's bench/sim_nodes)")
    args = ap.parse_args()
    print("| nodes x workers | rendezvous | node 0 peak RSS | node 0 CPU until running "
          "| node 0 CPU | node 0 CPU while running | node 0 fds | stop reaches every node "
          "| the simulator has handled it for every node | node 0 exit |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.nodes:
        print(one(args.build, n, args.nproc, hold=args.hold, sim_path=args.sim), flush=True)
        if not args.defaults_only:
            print(one(args.build, n, args.nproc, preflight=False, hold=args.hold,
                      sim_path=args.sim), flush=True)


if __name__ == "__main__":
    main()
