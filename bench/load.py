#!/usr/bin/env python3
"""Load figures of issue 9, in one run, as a Markdown table for
docs/PERFORMANCE.md:

    /usr/bin/python3 bench/load.py [--build build] [--pairs 5]

- 4,096 workers of /bin/true on one node: the launcher's peak memory (VmHWM
  from --summary-json), per worker over a 16-worker job;
- 1,024 workers of /bin/true, launch to exit, paired with bench/spawn_floor
  (posix_spawn them all, wait for all): one after the other, --pairs times,
  the ratio of each pair;
- 256 agents on loopback (one worker each) forming one job: wall time from
  the first start to the last exit, and every exit code;
- 2,000 concurrent store clients (bench/store_bench, one thread each, SET for
  3 s): operations per second and errors.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

from benchlib import free_port, raise_fds

HERE = os.path.dirname(os.path.abspath(__file__))




def vmhwm_kib(ddp, n):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([ddp, "--nproc-per-node", str(n), "--summary-json", f.name, "--", "true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       preexec_fn=raise_fds, timeout=600)
        return json.load(open(f.name))["launcher_max_rss_kib"]


def wall(cmd):
    t = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   preexec_fn=raise_fds, timeout=600)
    return time.monotonic() - t


def memory(ddp):
    small, big = vmhwm_kib(ddp, 16), vmhwm_kib(ddp, 4096)
    per = (big - small) / (4096 - 16)
    return (f"| 4,096 workers of `true` on one node: launcher VmHWM | {big / 1024:.1f} MiB, "
            f"{per:.1f} KiB per worker over a 16-worker job's {small / 1024:.1f} MiB | a few KiB per worker |")


def launch(ddp, floor, pairs):
    ratios, ours, base = [], [], []
    for _ in range(pairs):
        b = wall([floor, "1024", "/bin/true"])
        o = wall([ddp, "--nproc-per-node", "1024", "--", "/bin/true"])
        base.append(b)
        ours.append(o)
        ratios.append(o / b)
    return (f"| 1,024 workers of /bin/true, launch to exit, {pairs} pairs | ddplaunch {min(ours):.2f}–{max(ours):.2f} s, "
            f"floor {min(base):.2f}–{max(base):.2f} s: {min(ratios):.2f}×–{max(ratios):.2f}× "
            f"(median {sorted(ratios)[len(ratios) // 2]:.2f}×) | within 1.1× |")


def agents(ddp, n):
    port = free_port()
    common = ["--nnodes", str(n), "--nproc-per-node", "1", "--master-port", str(port),
              "--rdzv-timeout", "300", "--log-level", "error"]
    t = time.monotonic()
    procs = [subprocess.Popen([ddp, *common, "--node-rank", str(r), "--", "true"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=raise_fds) for r in range(n)]
    codes = [p.wait(timeout=600) for p in procs]
    elapsed = time.monotonic() - t
    ok = sum(c == 0 for c in codes)
    return (f"| {n} agents on loopback, one worker each, forming one job | {elapsed:.1f} s from the first "
            f"start to the last exit; {ok}/{n} agents exit 0 | one job |")


def store_clients(build, clients):
    # The server serves until its stdin closes.
    server = subprocess.Popen([os.path.join(build, "bench", "store_bench"), "serve"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              preexec_fn=raise_fds)
    try:
        port = server.stdout.readline().strip()
        r = subprocess.run([os.path.join(build, "bench", "store_bench"), "run", port, str(clients), "3", "set"],
                           capture_output=True, text=True, timeout=120, preexec_fn=raise_fds)
        measured = (f"{float(r.stdout):,.0f} sets/s, no error" if r.returncode == 0
                    else f"failed: {r.stderr.strip()[-200:]}")
        return f"| {clients:,} concurrent store clients (one thread each), SET for 3 s | {measured} | served |"
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    ddp = os.path.abspath(os.path.join(args.build, "ddplaunch"))
    floor = os.path.abspath(os.path.join(args.build, "bench", "spawn_floor"))
    print("| load | measured | target |\n|---|---|---|")
    for line in (memory(ddp), launch(ddp, floor, args.pairs), agents(ddp, 256),
                 store_clients(args.build, 2000)):
        print(line, flush=True)


if __name__ == "__main__":
    main()
