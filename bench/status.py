#!/usr/bin/env python3
"""`ddplaunch status` and --metrics-port, measured.

    /usr/bin/python3 bench/status.py [--build build] [--only stacks] [--simulated NODES...]
                                     [--simulated-stacks NODES...]

Rows: the time `ddplaunch status --json` takes (median of 10) for a real
job of 1 node x 64 ranks (asked as typed on its host: the job is found
from its workers' environment; run nothing else of yours meanwhile) and of
2 nodes x 32 ranks on loopback (through node 0's store), beside
`ps -e -o pid,stat,rss,args` (what a user types instead, on one host: the
floor of reading /proc); then for 256 nodes x 8 ranks, node 0 a real agent
and nodes 1..255 played by bench/sim_nodes (each answers as an agent does,
a record of 8 ranks; median of 5). Then the launch of a one-node job of N
`true` workers (median of 30) with and without --metrics-port: the
listener's own cost. Then a 1,024-worker launch (2 nodes x 512 `true` on
loopback, median of 10) alone and while `ddplaunch status --json` asks it
over and over from another process; and `ddplaunch stacks --json` for a
job of 1 node x 8 sleeping ranks (native `sleep`, and Python when gdb and
python3-dbg are installed; median of 3). With --simulated NODES..., only
`ddplaunch status` of simulated jobs of that many nodes x 8 ranks, and node
0's peak memory (VmHWM) once every node joined and after the requests;
past 9 nodes the answers travel the tree of agents as agents send them
(node 0's children answer for their subtrees; --build DIR runs DIR's own
bench/sim_nodes, which plays that build's agents). With --simulated-stacks
NODES..., only `ddplaunch stacks --json` of simulated jobs (each node's
answer on node 0's store: 8 ranks of 4 KiB of stacks each; median of 2)."""
import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time

from benchlib import free_port, raise_fds, run_timed

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd, runs):
    took = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        took.append(time.perf_counter() - t)
    return statistics.median(took)


def ranks_64(exe, nnodes):
    port = free_port()
    agents = [subprocess.Popen([exe, "--nnodes", str(nnodes), "--nproc-per-node", str(64 // nnodes),
                                "--master-port", str(port), "--", "sh", "-c",
                                "while :; do echo x; sleep 1; done"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(nnodes)]
    try:
        ask = [exe, "status", "--json"]
        if nnodes > 1:
            ask += ["--master-port", str(port)]
        for _ in range(600):
            r = subprocess.run(ask, capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.count('"rank"') == 64:
                break
            time.sleep(0.1)
        status = timed(ask, 10)
        floor = timed(["ps", "-e", "-o", "pid,stat,rss,args"], 10)
    finally:
        for a in agents:
            a.terminate()
        for a in agents:
            a.wait()
    label = "1 node x 64 ranks" if nnodes == 1 else f"{nnodes} nodes x {64 // nnodes} ranks, loopback"
    return (f"| {label} | {status * 1000:.1f} ms | "
            f"`ps -e`: {floor * 1000:.1f} ms | {status / floor:.2f}x, "
            f"{(status - floor) * 1000:+.1f} ms |")


def simulated(build, exe, nnodes=256, nproc=8, what="status"):
    port = free_port()
    addr = "127.0.3.7"
    node0 = subprocess.Popen([exe, "--nnodes", str(nnodes), "--node-rank", "0", "--nproc-per-node",
                              str(nproc), "--master-addr", addr, "--master-port", str(port),
                              "--log-level", "error", "--", "sleep", "600"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=raise_fds)
    sim = subprocess.Popen([os.path.join(build, "bench", "sim_nodes"), str(port), str(nnodes),
                            str(nproc), "sleep", "600"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "SIM_STORE_ADDR": addr,
                                "SIM_STACKS" if what == "stacks" else "SIM_STATUS": exe},
                           preexec_fn=raise_fds)
    # Node 0's peak memory once every node has joined, and after the
    # status requests.
    joined = None
    for line in sim.stderr:
        if line.startswith("joined"):
            joined = vm_hwm_mib(node0.pid)
            break
    # VmHWM only grows: the last one read before the simulator ends is the
    # peak through the status requests (once the simulated nodes are gone,
    # node 0 may end, and a process that ended has none).
    peak = [joined]
    done = threading.Event()

    def watch():
        while not done.wait(0.05):
            value = vm_hwm_mib(node0.pid)
            if value == value:  # not nan
                peak[0] = max(peak[0], value)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = sim.communicate(timeout=900)
    done.set()
    watcher.join()
    after = peak[0]
    node0.kill()
    node0.wait()
    if sim.returncode != 0:
        return f"| {nnodes} nodes x {nproc} ranks, simulated | failed: {err[-200:]} | | |"
    import json
    r = json.loads(out)
    return (f"| {nnodes} nodes x {nproc} ranks ({nnodes * nproc:,}), simulated | "
            f"{r[what + '_s'] * 1000:.1f} ms; node 0's peak {after:.1f} MiB "
            f"({joined:.1f} MiB once every node joined) | | |")


def vm_hwm_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def launch_cost(exe, nproc, runs=30):
    def median(extra):
        took = []
        for _ in range(runs):
            cmd = [exe, "--nproc-per-node", str(nproc), *extra(), "--", "true"]
            seconds, code = run_timed(cmd)
            assert code == 0, cmd
            took.append(seconds)
        return statistics.median(took)
    without = median(lambda: [])
    with_port = median(lambda: ["--metrics-port", str(free_port())])
    return (f"| {nproc} | {without * 1000:.2f} ms | {with_port * 1000:.2f} ms | "
            f"{with_port / without:.2f}x, {(with_port - without) * 1000:+.2f} ms |")


def launch_2x512(exe, asking):
    """Seconds until both agents of a 2 x 512 job of `true` exited; with
    `asking`, a status request is made over and over meanwhile."""
    port = free_port()
    done = threading.Event()
    asked = [0]

    def ask():
        while not done.is_set():
            subprocess.run([exe, "status", "--json", "--master-port", str(port), "--timeout", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            asked[0] += 1
    asker = threading.Thread(target=ask) if asking else None
    if asker:
        asker.start()
    t = time.perf_counter()
    agents = [subprocess.Popen([exe, "--nnodes", "2", "--nproc-per-node", "512", "--master-port",
                                str(port), "--", "true"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, preexec_fn=raise_fds) for _ in range(2)]
    codes = [a.wait() for a in agents]
    took = time.perf_counter() - t
    done.set()
    if asker:
        asker.join()
    assert codes == [0, 0], codes
    return took, asked[0]


def during_launch(exe, runs=10):
    alone = statistics.median(launch_2x512(exe, False)[0] for _ in range(runs))
    both = [launch_2x512(exe, True) for _ in range(runs)]
    asked = statistics.median(b[1] for b in both)
    with_status = statistics.median(b[0] for b in both)
    return (f"| 2 x 512 `true`, loopback | {alone * 1000:.0f} ms | {with_status * 1000:.0f} ms "
            f"({asked:.0f} requests during it) | {with_status / alone:.2f}x, "
            f"{(with_status - alone) * 1000:+.0f} ms |")


def stacks_latency(exe, program, label, runs=3, options=()):
    port = free_port()
    agents = [subprocess.Popen([exe, "--nnodes", "2", "--nproc-per-node", "4", "--master-port",
                                str(port), *options, "--", *program], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        ask = [exe, "stacks", "--json", "--master-port", str(port)]
        for _ in range(300):
            r = subprocess.run(ask, capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.count('"rank"') == 8:
                break
            time.sleep(0.1)
        took = timed(ask, runs)
    finally:
        for a in agents:
            a.terminate()
        for a in agents:
            a.wait()
    return f"| {label} | {took * 1000:.0f} ms | {took * 1000 / 8:.0f} ms |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--only", choices=["stacks"], help="only the stacks table")
    ap.add_argument("--simulated", type=int, nargs="+", metavar="NODES",
                    help="only `ddplaunch status` of simulated jobs of these many nodes x 8 ranks")
    ap.add_argument("--simulated-stacks", type=int, nargs="+", metavar="NODES",
                    help="only `ddplaunch stacks` of simulated jobs of these many nodes x 8 ranks")
    args = ap.parse_args()
    exe = os.path.abspath(os.path.join(args.build, "ddplaunch"))
    if args.simulated or args.simulated_stacks:
        what = "stacks" if args.simulated_stacks else "status"
        print(f"| job | `ddplaunch {what} --json` | floor | ratio, overhead |")
        print("|---|---|---|---|")
        for nnodes in args.simulated or args.simulated_stacks:
            print(simulated(args.build, exe, nnodes, what=what), flush=True)
        return
    if args.only != "stacks":
        status_tables(args, exe)
    print("| `ddplaunch stacks --json`, 2 nodes x 4 ranks | time | per rank |")
    print("|---|---|---|")
    print(stacks_latency(exe, ["sleep", "600"], "native (`sleep`: eu-stack)"), flush=True)
    py = "import time\ndef wait():\n    time.sleep(600)\nwait()"
    print(stacks_latency(exe, ["/usr/bin/python3", "-c", py], "Python (gdb py-bt where installed)"),
          flush=True)
    print(stacks_latency(exe, ["/usr/bin/python3", "-c", py],
                         "Python with `--python-stacks-signal USR2` (faulthandler + eu-stack)",
                         options=["--python-stacks-signal", "USR2"]), flush=True)


def status_tables(args, exe):
    print("| job | `ddplaunch status --json` | floor | ratio, overhead |")
    print("|---|---|---|---|")
    print(ranks_64(exe, 1), flush=True)
    print(ranks_64(exe, 2), flush=True)
    print(simulated(args.build, exe), flush=True)
    print()
    print("| workers | launch | with `--metrics-port` | ratio, overhead |")
    print("|---|---|---|---|")
    for nproc in (1, 64):
        print(launch_cost(exe, nproc), flush=True)
    print()
    print("| 1,024-worker launch | alone | with status asked meanwhile | ratio, overhead |")
    print("|---|---|---|---|")
    print(during_launch(exe), flush=True)
    print()


if __name__ == "__main__":
    main()
