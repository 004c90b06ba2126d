#!/usr/bin/env python3
"""Side-by-side benchmarks for ddplaunch (results go in docs/PERFORMANCE.md).

    /usr/bin/python3 bench/run.py [--build build] [--repeat 5] [--quick]

1. Launch: N workers of /bin/true: spawn floor (posix_spawn + wait), ddplaunch,
   mpirun --oversubscribe, torchrun (via torchrun_fixed.py).
2. ddplaunch's own peak RSS (from --summary-json) for that launch.
3. Output throughput: 4 workers each writing BYTES of lines, straight to
   /dev/null vs through ddplaunch (prefixing every line) to /dev/null.
4. Multi-node: rendezvous + launch + exit for A agents x 4 workers on loopback,
   ddplaunch vs torchrun (static rendezvous, one torchrun per node).
5. Failure propagation: rank on node 1 exits 7, all others sleep; time until
   every launcher has exited, and their exit codes.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PY = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd, repeat, **kw):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, **kw)
        except subprocess.TimeoutExpired:
            return None
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            return None
    return statistics.median(times)


def row(name, value, base, unit="s"):
    if value is None:
        print(f"| {name} | failed | |")
    else:
        print(f"| {name} | {value:.4f} {unit} | {value / base:.2f}x |")


def bench_launch(args, ddp, floor):
    n = args.nproc
    print(f"\n### Launch {n} x /bin/true (median of {args.repeat})\n")
    print("| launcher | wall time | vs floor |\n|---|---|---|")
    base = timed([floor, str(n), "/bin/true"], args.repeat)
    row("posix_spawn floor", base, base)
    row("ddplaunch", timed([ddp, "--nproc-per-node", str(n), "--", "/bin/true"], args.repeat), base)
    row("mpirun --oversubscribe", timed(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                                         "/bin/true"], args.repeat), base)
    row("torchrun", timed([TORCH_PY, os.path.join(HERE, "torchrun_fixed.py"), "--nproc_per_node", str(n),
                           "--no_python", "/bin/true"], max(1, args.repeat // 2)), base)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([ddp, "--nproc-per-node", str(n), "--summary-json", f.name, "--", "/bin/true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rss = json.load(open(f.name))["launcher_max_rss_kib"]
    print(f"\nddplaunch peak RSS (getrusage, launching {n}): {rss / 1024:.2f} MiB (target <= 8 MiB)")


def bench_throughput(args, ddp, worker):
    size = args.bytes
    print(f"\n### Output throughput: 4 workers x {size / 1e6:.0f} MB of 100-byte lines\n")
    t = time.perf_counter()
    procs = [subprocess.Popen([worker, f"flood={size}"], stdout=subprocess.DEVNULL,
                              env={**os.environ, "RANK": str(i)}) for i in range(4)]
    for p in procs:
        p.wait()
    direct = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([ddp, "--nproc-per-node", "4", "--", worker, f"flood={size}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    through = time.perf_counter() - t
    total = 4 * size / 1e6
    print("| path | time | MB/s | vs direct |\n|---|---|---|---|")
    print(f"| workers -> /dev/null | {direct:.3f} s | {total / direct:.0f} | 100% |")
    print(f"| workers -> ddplaunch (prefixed) -> /dev/null | {through:.3f} s | {total / through:.0f} | "
          f"{100 * direct / through:.0f}% |")


def run_agents(cmds, timeout=600):
    t = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    return time.perf_counter() - t, codes


def ddp_agents(ddp, nodes, nproc, program):
    port = free_port()
    return [[ddp, "--nnodes", str(nodes), "--node-rank", str(n), "--nproc-per-node", str(nproc),
             "--master-port", str(port), "--", *program] for n in range(nodes)]


def torch_agents(nodes, nproc, program):
    port = free_port()
    return [[TORCH_PY, os.path.join(HERE, "torchrun_fixed.py"), "--nnodes", str(nodes), "--node_rank", str(n),
             "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1", "--master_port", str(port),
             "--no_python", *program] for n in range(nodes)]


def bench_multinode(args, ddp, worker):
    print("\n### Multi-node: rendezvous + launch + exit, A agents x 4 workers of /bin/true on loopback\n")
    print("| agents | ddplaunch | torchrun (static) | ratio |\n|---|---|---|---|")
    for nodes in args.agents:
        d, dc = run_agents(ddp_agents(ddp, nodes, 4, ["/bin/true"]))
        if nodes <= args.torch_max_agents:
            t, tc = run_agents(torch_agents(nodes, 4, ["/bin/true"]))
            tt = f"{t:.2f} s (exit codes {sorted(set(map(str, tc)))})"
            ratio = f"{t / d:.1f}x faster"
        else:
            tt, ratio = "not run (memory: ~235 MiB per torchrun)", ""
        print(f"| {nodes} | {d:.2f} s (exit codes {sorted(set(map(str, dc)))}) | {tt} | {ratio} |")

    print("\n### Failure propagation: 2 nodes x 2 workers, rank 3 (node 1) exits 7, others sleep 300 s\n")
    prog = [worker, "@3:sleep=1", "@3:exit=7", "sleep=300"]
    d, dc = run_agents(ddp_agents(ddp, 2, 2, prog))
    print("| launcher | time until every launcher exited | exit codes (node 0, node 1) |\n|---|---|---|")
    print(f"| ddplaunch | {d - 1:.3f} s after the failure | {dc} |")
    if not args.quick:
        t, tc = run_agents(torch_agents(2, 2, prog), timeout=120)
        print(f"| torchrun (static) | {t - 1:.1f} s after the failure | {tc} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--nproc", type=int, default=32)
    ap.add_argument("--bytes", type=int, default=200_000_000)
    ap.add_argument("--agents", type=int, nargs="*", default=[2, 16, 64])
    ap.add_argument("--torch-max-agents", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="skip the slow torchrun failure run")
    args = ap.parse_args()
    ddp = os.path.abspath(os.path.join(args.build, "ddplaunch"))
    floor = os.path.abspath(os.path.join(args.build, "bench", "spawn_floor"))
    worker = os.path.abspath(os.path.join(args.build, "tests", "ddplaunch_worker"))
    print(f"machine: {os.cpu_count()} CPUs, {os.uname().sysname} {os.uname().release}")
    bench_launch(args, ddp, floor)
    bench_throughput(args, ddp, worker)
    bench_multinode(args, ddp, worker)


if __name__ == "__main__":
    main()
