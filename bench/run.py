#!/usr/bin/env python3
"""Side-by-side benchmarks for ddplaunch (results go in docs/PERFORMANCE.md).

    /usr/bin/python3 bench/run.py [--build build] [--repeat 7] [--floor-repeat 31] [--quick]

1. Launch: ddplaunch against the posix_spawn floor at 1, 32 and 1,024 workers,
   paired and alternating, with the floor's own time, the absolute overhead
   (ms fixed, us per worker) and a warning when the floor is slow; then N
   workers of /bin/true beside mpirun --oversubscribe and torchrun (via
   torchrun_fixed.py).
2. Peak RSS of each launcher for that launch (bench/peak_rss), and ddplaunch's
   own VmHWM from --summary-json.
3. Output throughput: 4 workers each writing BYTES of lines, straight to
   /dev/null, each into its own `cat`, through ddplaunch (prefixed and not),
   mpirun and torchrun --tee 3.
4. Store throughput: set/get/add ops per second with 1, 16 and 256 clients,
   ddplaunch's store vs PyTorch's TCPStore.
5. Multi-node: rendezvous + launch + exit for A agents x 4 workers on loopback,
   ddplaunch vs torchrun (static rendezvous, one torchrun per node).
6. Failure propagation: rank on node 1 exits 7, all others sleep; time from
   that exit until every launcher has exited, and their exit codes.
"""
import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import tempfile
import time

from benchlib import free_port, run_timed

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PY = "/usr/bin/python3"



def timed(cmd, repeat, timeout=60):
    """Median wall time of `repeat` runs; None if any run fails. Runs that
    exceed `timeout` are killed and counted as hangs, not as times."""
    times, hangs = [], 0
    for _ in range(repeat):
        elapsed, code = run_timed(cmd, timeout=timeout)
        if elapsed is None:
            hangs += 1
            continue
        times.append(elapsed)
        if code != 0:
            return None, hangs
    return (statistics.median(times) if times else None), hangs


def row(name, result, base):
    value, hangs = result
    note = f" ({hangs} of the runs hung and were killed)" if hangs else ""
    if value is None:
        print(f"| {name} | failed{note} | |")
    else:
        print(f"| {name} | {value:.4f} s{note} | {value / base:.2f}x |")


def peak_rss_mib(args, cmd, tries=3):
    """Peak RSS (MiB) of the largest process of `cmd`'s tree, via bench/peak_rss.
    A run that hangs (mpirun, see bench_launch) is killed with its whole session
    and tried again."""
    tool = os.path.join(args.build, "bench", "peak_rss")
    for _ in range(tries):
        with tempfile.NamedTemporaryFile(mode="r", suffix=".rss") as out:
            p = subprocess.Popen([tool, out.name, *cmd], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                continue
            text = out.read().strip()
            if text:
                return int(text) / 1024
    return None


def bench_launch_vs_floor(args, ddp, floor):
    """ddplaunch against the posix_spawn floor, paired: they alternate run by
    run (the order rotating), so a VM that slows down slows all. ddplaunch
    runs as it is by default (its PMIx server on, for MPI workers) and with
    --no-pmix (the launcher alone). Each ratio is printed beside the floor's
    own time and the absolute overhead, which does not move with the floor's
    speed."""
    sizes = args.launch_sizes
    print(f"\n### Launch against the posix_spawn floor: N x /bin/true, paired, "
          f"median of {args.floor_repeat} (wall and CPU of the whole tree)\n")
    print("| workers | floor | ddplaunch | wall ratio | overhead | ddplaunch --no-pmix | wall ratio | "
          "overhead | floor CPU | ddplaunch CPU | --no-pmix CPU | CPU ratio (--no-pmix) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = [ddp, "--no-prefix"]
    cmds = {"floor": lambda n: [floor, str(n), "/bin/true"],
            "ddp": lambda n: [*base, "--nproc-per-node", str(n), "--", "/bin/true"],
            "nopmix": lambda n: [*base, "--no-pmix", "--nproc-per-node", str(n), "--", "/bin/true"]}
    names = list(cmds)
    overhead = {"ddp": {}, "nopmix": {}}
    slow = []
    for n in sizes:
        runs = {k: [] for k in names}
        repeat = args.floor_repeat if n <= 64 else max(3, args.floor_repeat // 2)
        for i in range(repeat):
            for name in names[i % 3:] + names[:i % 3]:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                # No timeout=: with one, Popen.wait() polls with growing sleeps
                # and adds milliseconds to a launch that takes 2.
                subprocess.run(cmds[name](n), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True)
                wall = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
                runs[name].append((wall, cpu))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
               for k, v in runs.items()}
        (fw, fc), (dw, dc), (nw, nc) = med["floor"], med["ddp"], med["nopmix"]
        overhead["ddp"][n], overhead["nopmix"][n] = dw - fw, nw - fw
        if n > 1 and fw / n > 0.001:
            slow.append(n)
        print(f"| {n} | {fw * 1e3:.1f} ms | {dw * 1e3:.1f} ms | {dw / fw:.2f}x | "
              f"+{(dw - fw) * 1e3:.1f} ms | {nw * 1e3:.1f} ms | {nw / fw:.2f}x | "
              f"+{(nw - fw) * 1e3:.1f} ms | {fc * 1e3:.1f} ms | {dc * 1e3:.1f} ms | "
              f"{nc * 1e3:.1f} ms | {nc / fc:.2f}x |")
    if len(sizes) >= 2 and sizes[0] == 1:
        big = sizes[-1]
        for key, label in (("ddp", "ddplaunch"), ("nopmix", "ddplaunch --no-pmix")):
            per = (overhead[key][big] - overhead[key][1]) / (big - 1)
            print(f"\nAbsolute overhead beyond the floor, {label}: {overhead[key][1] * 1e3:.2f} ms "
                  f"fixed, {per * 1e6:.0f} us per worker (from {big} workers).")
    if slow:
        print(f"\nWARNING: the floor is slow on this machine (over 1 ms per worker at "
              f"{', '.join(map(str, slow))} workers): a slow floor hides a launcher's fixed costs; "
              f"read the absolute overhead, or measure again when the floor is fast.")


def bench_launch(args, ddp, floor):
    bench_launch_vs_floor(args, ddp, floor)
    n = args.nproc
    print(f"\n### Launch {n} x /bin/true beside the other launchers (median of {args.repeat})\n")
    print("| launcher | wall time | vs floor |\n|---|---|---|")
    base, _ = timed([floor, str(n), "/bin/true"], args.repeat)
    print(f"| posix_spawn floor | {base:.4f} s | 1.00x |")
    launchers = {
        "ddplaunch": [ddp, "--nproc-per-node", str(n), "--", "/bin/true"],
        "mpirun --oversubscribe": ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                                   "/bin/true"],
        "torchrun": [TORCH_PY, os.path.join(HERE, "torchrun_fixed.py"), "--nproc_per_node", str(n),
                     "--no_python", "/bin/true"],
    }
    row("ddplaunch", timed(launchers["ddplaunch"], args.repeat), base)
    # Open MPI 4.1 sometimes hangs after fast-exiting non-MPI programs
    # (open-mpi/ompi#10586 and friends): such runs are killed and counted.
    row("mpirun --oversubscribe", timed(launchers["mpirun --oversubscribe"], args.repeat, timeout=10), base)
    row("torchrun", timed(launchers["torchrun"], max(1, args.repeat // 2)), base)

    print(f"\n### Peak RSS launching {n} x /bin/true\n")
    print("| launcher | peak RSS (largest process of the tree, wait4) |\n|---|---|")
    for name, cmd in launchers.items():
        mib = peak_rss_mib(args, cmd)
        print(f"| {name} | {'failed' if mib is None else f'{mib:.1f} MiB'} |")
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([ddp, "--nproc-per-node", str(n), "--summary-json", f.name, "--", "/bin/true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rss = json.load(open(f.name))["launcher_max_rss_kib"]
    print(f"\nddplaunch's own VmHWM (--summary-json launcher_max_rss_kib): {rss / 1024:.2f} MiB "
          f"(target <= 8 MiB)")


def bench_throughput(args, ddp, worker):
    size = args.bytes
    total = 4 * size / 1e6
    print(f"\n### Output throughput: 4 workers x {size / 1e6:.0f} MB of 100-byte lines "
          f"(median of {args.tp_repeat})\n")
    w = f"{worker} flood={size}"
    rows = [
        ("workers -> /dev/null (the issue's baseline)",
         ["bash", "-c", f"for i in 0 1 2 3; do {w} > /dev/null & done; wait"]),
        ("each worker -> its own pipe -> cat -> /dev/null (pipe floor)",
         ["bash", "-c", f"for i in 0 1 2 3; do {w} | cat > /dev/null & done; wait"]),
        ("ddplaunch (prefixed, the default)", [ddp, "--nproc-per-node", "4", "--", worker, f"flood={size}"]),
        ("ddplaunch --no-prefix", [ddp, "--nproc-per-node", "4", "--no-prefix", "--", worker, f"flood={size}"]),
        ("mpirun (I/O forwarding)", ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                                     worker, f"flood={size}"]),
        ("mpirun --tag-output (prefixed)", ["mpirun", "--allow-run-as-root", "--oversubscribe",
                                            "--tag-output", "-np", "4", worker, f"flood={size}"]),
        ("torchrun --tee 3 (prefixed)", [TORCH_PY, os.path.join(HERE, "torchrun_fixed.py"),
                                         "--nproc_per_node", "4", "--tee", "3", "--no_python",
                                         worker, f"flood={size}"]),
    ]
    print("| path | time | MB/s | vs /dev/null | vs pipe floor |\n|---|---|---|---|---|")
    results = {}
    for name, cmd in rows:
        slow = not name.startswith(("workers", "each", "ddplaunch"))
        value, hangs = timed(cmd, 1 if slow else args.tp_repeat, timeout=600)
        results[name] = value
        direct, floor_ = results[rows[0][0]], results.get(rows[1][0]) or value
        if value is None:
            print(f"| {name} | failed | | | |")
        else:
            print(f"| {name} | {value:.3f} s | {total / value:.0f} | {100 * direct / value:.0f}% | "
                  f"{100 * floor_ / value:.0f}% |")


def bench_store(args):
    print(f"\n### Store throughput: operations per second, {args.store_seconds:.1f} s per cell\n")
    print("Every ddplaunch operation waits for the server's answer. TCPStore's set()\n"
          "does not (it is sent and forgotten), and its clients run in Python threads.\n")
    ours = [os.path.join(args.build, "bench", "store_bench")]
    theirs = [TORCH_PY, os.path.join(HERE, "store_torch.py")]
    # "sealed": the same store with a job token, so every connection
    # authenticates and every frame carries its MAC (docs/SECURITY.md).
    sealed_env = dict(os.environ, STORE_BENCH_TOKEN="bench token")
    kinds = (("ours", ours, None), ("sealed", ours, sealed_env), ("torch", theirs, None))
    print("| op | clients | ddplaunch store | with a token (sealed frames) | token's cost | "
          "TCPStore (torch 1.13) | ratio (no token) |\n|---|---|---|---|---|---|---|")
    servers = {}
    try:
        for name, cmd, env in kinds:
            p = subprocess.Popen([*cmd, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env)
            servers[name] = (p, int(p.stdout.readline()))
        for op in ("set", "get", "add"):
            for clients in args.store_clients:
                got = {}
                for name, cmd, env in kinds:
                    r = subprocess.run([*cmd, "run", str(servers[name][1]), str(clients),
                                        str(args.store_seconds), op],
                                       capture_output=True, text=True, timeout=300, env=env)
                    got[name] = float(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
                o, s, t = got["ours"], got["sealed"], got["torch"]
                ratio = f"{o / t:.1f}x" if o and t else ""
                cost = f"{100 * (1 - s / o):.0f}% fewer ops/s" if o and s else ""
                fmt = lambda v: "failed" if v is None else f"{v:,.0f}"
                print(f"| {op} | {clients} | {fmt(o)} | {fmt(s)} | {cost} | {fmt(t)} | {ratio} |")
    finally:
        for p, _ in servers.values():
            p.stdin.close()
            p.wait(timeout=30)


def alarm(*_):
    raise TimeoutError  # ends the os.wait() in run_agents (PEP 475 would retry it)


def run_agents(cmds, timeout=600):
    """Starts every agent at once, each in its own session; waits for all.
    Returns (seconds until the last exited, exit codes, wall-clock exit times).
    Whatever an agent left running in its session (or all of it, on timeout)
    is killed afterwards."""
    t = time.perf_counter()
    deadline = time.monotonic() + timeout
    procs = [subprocess.Popen(c, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True) for c in cmds]
    index = {p.pid: i for i, p in enumerate(procs)}
    codes, ends = ["timeout"] * len(procs), [float("nan")] * len(procs)
    pending = set(index)
    while pending and time.monotonic() < deadline:
        # Blocking wait for any of them: exact exit times, no polling interval.
        signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic()))
        try:
            pid, status = os.wait()
        except TimeoutError:
            break
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if pid in pending:
            pending.discard(pid)
            codes[index[pid]] = os.waitstatus_to_exitcode(status)
            ends[index[pid]] = time.time()
            procs[index[pid]].returncode = codes[index[pid]]
    elapsed = time.perf_counter() - t
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if p.pid in pending:
            try:
                os.waitpid(p.pid, 0)
            except ChildProcessError:
                pass
    return elapsed, codes, ends


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
        d, dc, _ = run_agents(ddp_agents(ddp, nodes, 4, ["/bin/true"]))
        if nodes <= args.torch_max_agents:
            t, tc, _ = run_agents(torch_agents(nodes, 4, ["/bin/true"]))
            tt = f"{t:.2f} s (exit codes {sorted(set(map(str, tc)))})"
            ratio = f"{t / d:.1f}x faster"
        else:
            tt, ratio = "not run (memory: ~235 MiB per torchrun)", ""
        print(f"| {nodes} | {d:.2f} s (exit codes {sorted(set(map(str, dc)))}) | {tt} | {ratio} |")

    print("\n### Failure propagation: the last rank exits 7 after 1 s, the others sleep 60 s\n")
    print("Measured from the failing worker's exit (the mtime of a file it creates just\n"
          "before exiting) to each launcher's exit. 2 nodes x 2 workers (rank 3 on node 1),\n"
          "and 16 nodes x 1 worker (rank 15 on node 15: past 9 nodes the verdict travels the\n"
          "tree of agents, and node 15 is below node 0's children).\n")
    print("| launcher | nodes x workers | node 0 exited after | the last node exited after | exit codes |\n"
          "|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as marks:
        def prog(rank):
            return [worker, f"@{rank}:sleep=1", f"@{rank}:ready={marks}", f"@{rank}:exit=7",
                    "sleep=60"]
        launches = [("ddplaunch", 2, 2, lambda: ddp_agents(ddp, 2, 2, prog(3)), 60),
                    ("ddplaunch", 16, 1, lambda: ddp_agents(ddp, 16, 1, prog(15)), 60)]
        if not args.quick:
            launches.append(("torchrun (static)", 2, 2, lambda: torch_agents(2, 2, prog(3)), 150))
        for name, nodes, nproc, make, timeout in launches:
            mark = os.path.join(marks, f"ready.{nodes * nproc - 1}")
            if os.path.exists(mark):
                os.unlink(mark)
            _, codes, ends = run_agents(make(), timeout=timeout)
            failed_at = os.stat(mark).st_mtime if os.path.exists(mark) else float("nan")
            after = [f"{end - failed_at:.3f} s" if code != "timeout" else f"still running at {timeout} s"
                     for code, end in zip(codes, ends)]
            last = max(after, key=lambda a: float(a.split()[0]) if a[0].isdigit() else 1e9)
            print(f"| {name} | {nodes} x {nproc} | {after[0]} | {last} | {sorted(set(map(str, codes)))} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--nproc", type=int, default=32)
    ap.add_argument("--launch-sizes", type=int, nargs="*", default=[1, 32, 1024],
                    help="worker counts for the paired comparison with the floor")
    ap.add_argument("--floor-repeat", type=int, default=31,
                    help="runs of each in the paired comparison with the floor (half from 65 "
                         "workers on): a launch of 32 varies by 10%% from run to run here, so "
                         "a median of 7 may land either side of a 1.1x target")
    ap.add_argument("--bytes", type=int, default=200_000_000)
    ap.add_argument("--agents", type=int, nargs="*", default=[2, 16, 64])
    ap.add_argument("--torch-max-agents", type=int, default=16)
    ap.add_argument("--tp-repeat", type=int, default=5)
    ap.add_argument("--store-clients", type=int, nargs="*", default=[1, 16, 256])
    ap.add_argument("--store-seconds", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="skip the slow torchrun failure run")
    ap.add_argument("--only", nargs="*", choices=["launch", "throughput", "store", "multinode"],
                    help="run only these sections (default: all)")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, alarm)
    args.build = os.path.abspath(args.build)
    ddp = os.path.abspath(os.path.join(args.build, "ddplaunch"))
    floor = os.path.abspath(os.path.join(args.build, "bench", "spawn_floor"))
    worker = os.path.abspath(os.path.join(args.build, "tests", "ddplaunch_worker"))
    print(f"machine: {os.cpu_count()} CPUs, {os.uname().sysname} {os.uname().release}")
    sections = {
        "launch": lambda: bench_launch(args, ddp, floor),
        "throughput": lambda: bench_throughput(args, ddp, worker),
        "store": lambda: bench_store(args),
        "multinode": lambda: bench_multinode(args, ddp, worker),
    }
    for name in args.only or sections:
        sections[name]()


if __name__ == "__main__":
    main()
