#!/usr/bin/env python3
"""What hosting a PMIx server costs, and ddplaunch against mpirun, side by
side in one run, interleaved round by round (medians):

  - launch cost of N workers of `true` with the server (the default: it
    starts only when a worker connects, which `true` never does), with the
    server started before the workers (DDPLAUNCH_PMIX_LAZY=0: what a first
    launch pays) and with --no-pmix, and the posix_spawn floor
    (bench/spawn_floor);
  - an MPI program (tests/helpers/mpi_hello.c: MPI_Init, an allreduce, a
    ring, MPI_Finalize) as N ranks under ddplaunch (the server started by
    the first rank that connects, and started first) and under
    `mpirun -np N`.

    /usr/bin/python3 bench/mpi.py [--build build] [--workers 1 32] [--rounds 20]
"""
import argparse
import os
import statistics
import subprocess

from benchlib import run_timed

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd, env=None, timeout=10):
    """Seconds, or None when it hung past `timeout` (Open MPI 4.1's mpirun
    sometimes never returns when 32 processes end at once)."""
    elapsed, code = run_timed(cmd, env, timeout)
    if elapsed is None:
        subprocess.run(["pkill", "-KILL", "-f", "ddplaunch_mpi_hello"], check=False)
        return None
    if code != 0:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}")
    return elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    b = os.path.abspath(args.build)
    bin_ = os.path.join(b, "ddplaunch")
    hello = os.path.join(b, "tests", "ddplaunch_mpi_hello")
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    print("| workers | floor (posix_spawn) | ddplaunch --no-pmix | ddplaunch (PMIx server) | "
          "server's cost | server started first | mpirun -np N true | MPI program: ddplaunch | "
          "MPI program: ddplaunch, server first | MPI program: mpirun | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    first = dict(env, DDPLAUNCH_PMIX_LAZY="0")
    for n in args.workers:
        cases = {
            "floor": [os.path.join(b, "bench", "spawn_floor"), str(n), "true"],
            "nopmix": [bin_, "--no-pmix", "--nproc-per-node", str(n), "--", "true"],
            "pmix": [bin_, "--nproc-per-node", str(n), "--", "true"],
            "pmix_first": [bin_, "--nproc-per-node", str(n), "--", "true"],
            "mpirun_true": [*mpirun, "-np", str(n), "true"],
            "mpi_ddp": [bin_, "--nproc-per-node", str(n), "--", hello],
            "mpi_ddp_first": [bin_, "--nproc-per-node", str(n), "--", hello],
            "mpi_mpirun": [*mpirun, "-np", str(n), hello],
        }
        times = {k: [] for k in cases}
        hung = {k: 0 for k in cases}
        for _ in range(args.rounds):
            for k, cmd in cases.items():
                t = timed(cmd, first if k.endswith("_first") else env)
                if t is None:
                    hung[k] += 1
                else:
                    times[k].append(t * 1000)
        m = {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
        note = {k: f" ({hung[k]} of {args.rounds} hung)" if hung[k] else "" for k in cases}
        print(f"| {n} | {m['floor']:.1f} ms | {m['nopmix']:.1f} ms | {m['pmix']:.1f} ms | "
              f"+{m['pmix'] - m['nopmix']:.1f} ms ({m['pmix'] / m['nopmix']:.2f}x) | "
              f"{m['pmix_first']:.1f} ms (+{m['pmix_first'] - m['nopmix']:.1f}, "
              f"{m['pmix_first'] / m['nopmix']:.2f}x) | "
              f"{m['mpirun_true']:.1f} ms{note['mpirun_true']} | {m['mpi_ddp']:.1f} ms{note['mpi_ddp']} | "
              f"{m['mpi_ddp_first']:.1f} ms{note['mpi_ddp_first']} | "
              f"{m['mpi_mpirun']:.1f} ms{note['mpi_mpirun']} | "
              f"{m['mpi_mpirun'] / m['mpi_ddp']:.2f}x faster |", flush=True)


if __name__ == "__main__":
    main()
