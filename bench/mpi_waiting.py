#!/usr/bin/env python3
"""MPI ranks that outnumber their CPUs, and a rank's stdout as a terminal,
side by side in one run, interleaved round by round (medians):

  - 4 ranks of tests/helpers/mpi_hello.c doing N barriers on 2 CPUs (taskset):
    mpirun --oversubscribe (its ranks yield while they wait), ddplaunch with
    its defaults (it tells them to yield: more ranks than CPUs), and
    ddplaunch with OMPI_MCA_mpi_yield_when_idle=0 (ranks that spin, as every
    ddplaunch job did before);
  - the same 4 ranks as two agents of 2 ranks on one host (2 + 2 on 2 CPUs);
  - the floor and ddplaunch's time are whole runs (start to exit); the
    barriers' own time is rank 0's (MPI_Wtime around the loop);
  - a flood of MB megabytes in 100-byte lines from one rank through a pipe
    (--stdout-tty no) and through a terminal (--stdout-tty yes), against the
    same command writing to /dev/null.

    /usr/bin/python3 bench/mpi_waiting.py [--build build] [--barriers 5000] [--rounds 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import time

from benchlib import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmds, timeout=600):
    """Runs `cmds` at once; (wall seconds, rank 0's barrier seconds or None)."""
    t = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, text=True) for c in cmds]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"failed ({p.returncode}): {' '.join(p.args)}")
        outs.append(out)
    wall = time.perf_counter() - t
    m = re.search(r"barriers \d+ took ([\d.]+) seconds", "".join(outs))
    return wall, float(m[1]) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--barriers", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mb", type=int, default=100)
    args = ap.parse_args()
    b = os.path.abspath(args.build)
    ddp = os.path.join(b, "ddplaunch")
    hello = [os.path.join(b, "tests", "ddplaunch_mpi_hello"), f"barriers:{args.barriers}"]
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs")
    pin = ["taskset", "-c", ",".join(map(str, cpus))]
    env_spin = ["env", "OMPI_MCA_mpi_yield_when_idle=0"]

    def agents(prefix=()):
        port = str(free_port())
        return [[*prefix, *pin, ddp, "--nnodes", "2", "--nproc-per-node", "2", "--master-port",
                 port, "--", *hello] for _ in range(2)]

    cases = {
        "mpirun --oversubscribe": lambda: [[*pin, "mpirun", "--allow-run-as-root",
                                            "--oversubscribe", "-np", "4", *hello]],
        "ddplaunch": lambda: [[*pin, ddp, "--nproc-per-node", "4", "--", *hello]],
        "ddplaunch, ranks spinning": lambda: [[*env_spin, *pin, ddp, "--nproc-per-node", "4",
                                               "--", *hello]],
        "ddplaunch, 2 agents x 2": agents,
        "ddplaunch, 2 agents x 2, spinning": lambda: agents(env_spin),
    }
    walls = {k: [] for k in cases}
    loops = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, make in cases.items():
            wall, loop = run(make())
            walls[k].append(wall)
            loops[k].append(loop)
    base = statistics.median(walls["mpirun --oversubscribe"])
    base_loop = statistics.median(loops["mpirun --oversubscribe"])
    print(f"4 ranks, {args.barriers} barriers, on 2 CPUs ({args.rounds} rounds, medians)\n")
    print("| launcher | whole run | against mpirun | barriers (rank 0) | against mpirun |")
    print("|---|---|---|---|---|")
    for k in cases:
        w, l = statistics.median(walls[k]), statistics.median(loops[k])
        print(f"| {k} | {w:.2f} s | {w / base:.2f}x ({w - base:+.2f} s) | {l:.3f} s | "
              f"{l / base_loop:.2f}x ({l - base_loop:+.3f} s) |", flush=True)

    # A rank's flood through a pipe and through a terminal.
    flood = ["sh", "-c", f"head -c {args.mb * 1000000} /dev/zero | tr '\\0' x | fold -w 99"]
    floors, pipes, ttys, mpiruns = [], [], [], []
    for _ in range(args.rounds):
        for out, cmd in ((floors, flood), (pipes, [ddp, "--stdout-tty", "no", "--", *flood]),
                         (ttys, [ddp, "--stdout-tty", "yes", "--", *flood]),
                         (mpiruns, ["mpirun", "--allow-run-as-root", "-np", "1", *flood])):
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            out.append(time.perf_counter() - t)
    f, p, t, m = (statistics.median(v) for v in (floors, pipes, ttys, mpiruns))
    print(f"\n{args.mb} MB in 100-byte lines from one rank ({args.rounds} rounds, medians)\n")
    print("| stdout | time | against the floor |")
    print("|---|---|---|")
    print(f"| floor (the command into /dev/null) | {f:.3f} s | 1.00x |")
    print(f"| ddplaunch, a pipe (--stdout-tty no) | {p:.3f} s | {p / f:.2f}x ({p - f:+.3f} s) |")
    print(f"| ddplaunch, a terminal (--stdout-tty yes) | {t:.3f} s | {t / f:.2f}x ({t - f:+.3f} s) |")
    print(f"| mpirun -np 1 (a terminal) | {m:.3f} s | {m / f:.2f}x ({m - f:+.3f} s) |")


if __name__ == "__main__":
    main()
