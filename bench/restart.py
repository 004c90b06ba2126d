#!/usr/bin/env python3
"""Restart rounds and lost-node detection, ddplaunch against torchrun (c10d
rendezvous, the backend torchrun restarts with), the same shape on loopback:
2 agents x 2 workers, one Python worker script.

    /usr/bin/python3 bench/restart.py [--build build] [--repeat 3]

Restart round: rank 3 (node 1) fails once every rank runs; with
--max-restarts 1, from the failing worker's exit (the time it writes just
before exiting) to the last worker of the new round started (the time each
writes first thing; Python's start-up counts for both launchers).

Lost node: once every rank runs, node 1's agent is SIGKILLed; from then to
node 0's agent's exit (capped at 60 s: torchrun's agent does not watch its
peers, and its workers here do no collective that would fail).

Elastic: 3 agents x 2 workers with --nnodes 2:3 and one restart; once every
rank runs, node 2's agent is SIGKILLed; from then to the last worker of the
2-node round started (capped at 60 s, as above).

A spare (issue 22, `--spare-only`): 16 agents, 15 running a job of
--nnodes 8:15 with one shell worker each and one waiting as a spare; node
5's agent SIGKILLed to every worker of the next round (the spare's
included) started.

Restart over leftovers (issue 22): the restart round again, but the failing
rank first leaves a chain of 12 processes outside its process group (each
the child of the last, all sleeping); ddplaunch kills and waits for them
before round 1 starts (--restart-reclaim-timeout). torchrun's agent leaves
them running: the row says whether any was left when round 1 started.
"""
import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PY = "/usr/bin/python3"

WORKER = r"""
import os, sys, time
t = time.time()
d, mode = sys.argv[1], sys.argv[2]
rnd, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
def note(name, value):  # whole or not at all: the bench reads it at once
    open(f"{d}/.{name}", "w").write(repr(value))
    os.rename(f"{d}/.{name}", f"{d}/{name}")
note(f"start.{rnd}.{rank}", t)
if mode.startswith("fail") and rnd == 0 and rank == 3:
    while len([f for f in os.listdir(d) if f.startswith("start.0.")]) < 4:
        time.sleep(0.01)
    if mode == "fail-strays":  # 12 nested processes, out of our group
        import subprocess
        chain = ('n=$1; if [ "$n" -le 0 ]; then echo $$ > "$2/.deepest"; mv "$2/.deepest" "$2/deepest"; '
                 'exec sleep 300; fi; sh -c "$0" "$0" $((n-1)) "$2" & wait')
        subprocess.Popen(["sh", "-c", chain, chain, "12", d], start_new_session=True)
        while not os.path.exists(f"{d}/deepest"):
            time.sleep(0.005)
    note("fail", time.time())
    os._exit(1)
if rnd == 1 and rank == 0 and os.path.exists(f"{d}/deepest"):
    try:
        os.kill(int(open(f"{d}/deepest").read()), 0)
        note("leftover", "alive")
    except ProcessLookupError:
        note("leftover", "gone")
if rnd == 0:
    time.sleep(60)
"""


def agents(launcher, build, port, program, restarts, nnodes="2", count=2):
    if launcher == "ddplaunch":
        return [[os.path.join(build, "ddplaunch"), "--nnodes", nnodes, "--node-rank", str(n),
                 "--nproc-per-node", "2", "--master-port", str(port), "--max-restarts", str(restarts),
                 "--", *program] for n in range(count)]
    return [[TORCH_PY, os.path.join(HERE, "torchrun_fixed.py"), "--nnodes", nnodes, "--nproc_per_node", "2",
             "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "bench",
             "--max_restarts", str(restarts), "--monitor_interval", "0.1", "--no_python", *program]
            for _ in range(count)]


def start(cmds):
    return [subprocess.Popen(c, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True) for c in cmds]


def cleanup(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def wait_for(pattern, count, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(glob.glob(pattern)) >= count:
            return True
        time.sleep(0.005)
    return False


def restart_round(launcher, build, script):
    with tempfile.TemporaryDirectory() as d:
        procs = start(agents(launcher, build, free_port(), [TORCH_PY, script, d, "fail"], 1))
        try:
            if not wait_for(f"{d}/start.1.*", 4, timeout=60):
                return None
            failed = float(open(f"{d}/fail").read())
            return max(float(open(f).read()) for f in glob.glob(f"{d}/start.1.*")) - failed
        finally:
            cleanup(procs)


def restart_over_strays(launcher, build, script):
    """The restart round when the failing rank left 12 escaped processes:
    (seconds, whether the deepest was still alive when round 1 started)."""
    with tempfile.TemporaryDirectory() as d:
        procs = start(agents(launcher, build, free_port(), [TORCH_PY, script, d, "fail-strays"], 1))
        try:
            if not wait_for(f"{d}/start.1.*", 4, timeout=60) or not wait_for(f"{d}/leftover", 1, 10):
                return None
            failed = float(open(f"{d}/fail").read())
            took = max(float(open(f).read()) for f in glob.glob(f"{d}/start.1.*")) - failed
            return took, open(f"{d}/leftover").read().strip("'")
        finally:
            cleanup(procs)
            subprocess.run(["pkill", "-KILL", "-f", f"sh -c n=.*{d}"], check=False)


def lost_node(launcher, build, script):
    with tempfile.TemporaryDirectory() as d:
        procs = start(agents(launcher, build, free_port(), [TORCH_PY, script, d, "sleep"], 0))
        try:
            if not wait_for(f"{d}/start.0.*", 4):
                return None
            # torchrun's agents take ranks by arrival: kill the one not hosting rank 0.
            victim = procs[1]
            t = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            try:
                procs[0].wait(timeout=60)
            except subprocess.TimeoutExpired:
                return float("inf")
            return time.monotonic() - t
        finally:
            cleanup(procs)


def elastic_lost_node(launcher, build, script):
    with tempfile.TemporaryDirectory() as d:
        procs = start(agents(launcher, build, free_port(), [TORCH_PY, script, d, "sleep"], 1,
                             nnodes="2:3", count=3))
        try:
            if not wait_for(f"{d}/start.0.*", 6):
                return None
            victim = procs[2]  # not the store's host, for either launcher
            t = time.time()
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            if not wait_for(f"{d}/start.1.*", 4, timeout=60):
                return None
            return max(float(open(f).read()) for f in glob.glob(f"{d}/start.1.*")) - t
        finally:
            cleanup(procs)


SHELL_WORKER = ('t=$(date +%s.%N); r=$TORCHELASTIC_RESTART_COUNT; '
                'echo "$t" > "$0/.start.$r.$RANK"; mv "$0/.start.$r.$RANK" "$0/start.$r.$RANK"; '
                '[ "$r" != 0 ] || exec sleep 60')


def spare_replacement(build, agents_count=16):
    """Hot spares (issue 22): agents_count - 1 agents run a job of --nnodes
    8:MAX (MAX = agents_count - 1), one worker each; one more agent joins and
    waits as a spare. Node 5's agent is SIGKILLed: from then to every worker
    of the new round (the spare's included) started."""
    nmax = agents_count - 1
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        base = [os.path.join(build, "ddplaunch"), "--nnodes", f"8:{nmax}", "--nproc-per-node", "1",
                "--master-port", str(port), "--max-restarts", "1", "--rdzv-last-call", "600",
                "--no-pmix"]
        program = ["--", "sh", "-c", SHELL_WORKER, d]
        procs = start([base + ["--node-rank", str(n)] + program for n in range(nmax)])
        try:
            if not wait_for(f"{d}/start.0.*", nmax):
                return None
            spare = subprocess.Popen(base + program, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
            procs.append(spare)
            for line in spare.stderr:  # until it waits, rendezvoused
                if "waits to be admitted" in line:
                    break
            victim = procs[5]
            t = time.time()
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            if not wait_for(f"{d}/start.1.*", nmax, timeout=60):
                return None
            return max(float(open(f).read()) for f in glob.glob(f"{d}/start.1.*")) - t
        finally:
            cleanup(procs)


def show(values):
    ok = [v for v in values if v is not None and v != float("inf")]
    if not ok:
        return ("node 0 did not exit within 60 s" if any(v == float("inf") for v in values)
                else "the new round did not start every worker within 60 s")
    text = f"{statistics.median(ok) * 1000:.0f} ms (median of {len(ok)})"
    if len(ok) < len(values):
        text += f"; {len(values) - len(ok)} runs did not finish"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--leftovers-only", action="store_true",
                    help="only the restart over leftovers (issue 22)")
    ap.add_argument("--spare-only", action="store_true",
                    help="only the lost member replaced by a spare (issue 22)")
    args = ap.parse_args()
    if args.spare_only:
        runs = [spare_replacement(args.build) for _ in range(args.repeat)]
        print("| 16 agents (15 running + 1 spare), 1 worker each, loopback | ddplaunch | target |\n"
              "|---|---|---|")
        print(f"| a lost member replaced by the spare (SIGKILL to every worker of the new round "
              f"started) | {show(runs)} | 300 ms |", flush=True)
        return 0
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(WORKER)
        script = f.name
    try:
        print("| 2 agents x 2 workers, loopback | ddplaunch | torchrun (c10d) | ratio |\n|---|---|---|---|")
        rows = (("restart round (failing exit to every new worker started)", restart_round),
                ("lost node (agent SIGKILLed to node 0's exit)", lost_node),
                ("elastic 2:3, node 2 lost (agent SIGKILLed to every worker of the "
                 "2-node round started)", elastic_lost_node))
        for name, measure in () if args.leftovers_only else rows:
            ours = [measure("ddplaunch", args.build, script) for _ in range(args.repeat)]
            theirs = [measure("torchrun", args.build, script) for _ in range(args.repeat)]
            good = [v for v in ours if v not in (None, float("inf"))]
            base = [v for v in theirs if v not in (None, float("inf"))]
            ratio = (f"{statistics.median(base) / statistics.median(good):.0f}x faster"
                     if good and base else "")
            print(f"| {name} | {show(ours)} | {show(theirs)} | {ratio} |", flush=True)
        cells = []
        for launcher in ("ddplaunch", "torchrun"):
            runs = [restart_over_strays(launcher, args.build, script) for _ in range(args.repeat)]
            done = [r for r in runs if r is not None]
            alive = sum(1 for r in done if r[1] == "alive")
            cells.append(show([r[0] for r in done] + [None] * (len(runs) - len(done))) +
                         f"; the leftovers alive in round 1: {alive} of {len(done)} runs")
        print(f"| restart round over 12 escaped processes the failing rank left | {cells[0]} | "
              f"{cells[1]} | |", flush=True)
    finally:
        os.unlink(script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
