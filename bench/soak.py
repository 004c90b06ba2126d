#!/usr/bin/env python3
"""Soak: a 16-agent job on loopback, again and again, each time with a random
fault injected, and every agent's verdict checked.

    /usr/bin/python3 bench/soak.py [--bin build/ddplaunch] [--runs 50] [--minutes 10]
                                   [--agents 16] [--seed S]

Faults, one per run, chosen at random (the seed is printed, so a run can be
repeated): none; a rank exits with a random code; a rank dies by SIGKILL;
one agent gets SIGTERM; one agent is SIGKILLed (the others must call it lost
after the heartbeat timeout). Each run checks every agent's exit code against
the documented one and that no process of the job is left. Bounded by --runs
and --minutes, whichever ends first; exits 1 at the first wrong verdict or
leftover process, printing what it saw.
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import time
import uuid

from benchlib import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
HEARTBEAT = ["--heartbeat-interval", "0.2", "--heartbeat-timeout", "3"]



def marked(marker):
    needle = ("SOAK_MARKER=" + marker).encode()
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in env and state != "Z":
                found.append(int(pid))
    return found


def one_run(args, rng, run):
    agents, nproc = args.agents, 2
    world = agents * nproc
    fault = rng.choice(["none", "exit", "sigkill-rank", "sigterm-agent", "sigkill-agent"])
    victim_rank = rng.randrange(world)
    victim_node = rng.randrange(agents)
    code = rng.randrange(1, 120)
    ready = f"/tmp/soak-{uuid.uuid4().hex}"
    os.mkdir(ready)
    # Every rank writes a ready file, then the victim acts; the others wait.
    act = {"none": "exit 0", "exit": f"exit {code}", "sigkill-rank": "kill -9 $$"}.get(fault, ":")
    script = (f'touch {ready}/$RANK; '
              f'if [ "{fault}" = none ]; then exit 0; fi; '
              f'while [ $(ls {ready} | wc -l) -lt {world} ]; do sleep 0.05; done; '
              f'if [ "$RANK" = {victim_rank} ]; then {act}; fi; '
              'exec sleep 300')
    marker = uuid.uuid4().hex
    env = dict(os.environ, SOAK_MARKER=marker)
    port = free_port()
    procs = []
    for n in range(agents):
        cmd = [args.bin, "--nnodes", str(agents), "--node-rank", str(n), "--nproc-per-node",
               str(nproc), "--master-port", str(port), "--log-level", "error", *HEARTBEAT,
               "--", "sh", "-c", script]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    if fault in ("sigterm-agent", "sigkill-agent"):
        deadline = time.monotonic() + 60
        while len(os.listdir(ready)) < world and time.monotonic() < deadline:
            time.sleep(0.02)
        procs[victim_node].send_signal(signal.SIGTERM if fault == "sigterm-agent" else signal.SIGKILL)
    start = time.monotonic()
    codes, errs = [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        codes.append(p.returncode)
        errs.append(err)
    took = time.monotonic() - start
    expected = {"none": 0, "exit": code, "sigkill-rank": 128 + 9, "sigterm-agent": 143,
                "sigkill-agent": 4}[fault]
    want = [expected] * agents
    if fault == "sigkill-agent":
        want[victim_node] = -9  # the one killed
    leftover = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        leftover = marked(marker)
        if not leftover:
            break
        time.sleep(0.05)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", ready])
    ok = codes == want and not leftover
    print(f"run {run}: {fault:13} victim rank {victim_rank:3} node {victim_node:2}: "
          f"exit codes {'all ' + str(expected) if ok else codes} in {took:.2f} s"
          f"{'' if ok else ' WRONG'}", flush=True)
    if not ok:
        print(f"  expected {want}; leftover processes {leftover}", flush=True)
        for n, err in enumerate(errs):
            if codes[n] != want[n]:
                print(f"  node {n} stderr:\n" + "".join("    " + l + "\n" for l in err.splitlines()[-8:]))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "ddplaunch"))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"soak: seed {seed}, {args.agents} agents x 2 workers, up to {args.runs} runs "
          f"or {args.minutes} min", flush=True)
    rng = random.Random(seed)
    end = time.monotonic() + args.minutes * 60
    done = 0
    while done < args.runs and time.monotonic() < end:
        if not one_run(args, rng, done):
            sys.exit(1)
        done += 1
    print(f"soak: {done} runs, every verdict as documented, nothing left running")


if __name__ == "__main__":
    main()
