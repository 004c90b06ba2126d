#!/usr/bin/env python3
"""One command for many hosts (issue 20), side by side; results go in
docs/PERFORMANCE.md.

    /usr/bin/python3 bench/hosts.py [--build build] [--repeat 5] [--skip-ssh]

1. Fan-out, simulated: `ddplaunch --hosts h0..h1023 --launcher local` (every
   agent on this machine, each a real agent with one /bin/true worker), with
   DDPLAUNCH_SIM_CONNECT_MS=D: each connection a launching host opens costs
   it D ms, one after another (the CPU an ssh handshake takes on the host
   that opens it). Flat (--fanout 1024: this host opens 1,023) against the
   tree (--fanout 32: 32 here, the rest by 32 subtree roots). Reports the
   time until every agent has started (the launcher's own count) and the
   wall time of the whole job.
2. Over real ssh (needs root, iproute2 and openssh-server: the test suite's
   network-namespace hosts with sshd, tests/integration/sshd.py): 4 hosts x
   4 /bin/true, `ddplaunch --hosts` against `mpirun -H` with the same ssh
   config, and failure propagation: one rank exits 7 while the other 15
   sleep; time until the launching command has exited, and its exit code.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))


def median_run(cmd, repeat, env=None, timeout=300):
    walls, outs = [], []
    for _ in range(repeat):
        t = time.monotonic()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        walls.append(time.monotonic() - t)
        outs.append(r)
    return statistics.median(walls), outs


def fanout(ddplaunch, repeat, hosts=1024):
    names = ",".join(f"h{i}" for i in range(hosts))
    print(f"## Fan-out, simulated: {hosts} agents on this machine, 1 worker each")
    print("| connection cost D | --fanout | all agents started | whole job (wall) |")
    print("|---|---|---|---|")
    for cost in (0, 5):
        for k in (hosts, 32):
            env = dict(os.environ, DDPLAUNCH_SIM_CONNECT_MS=str(cost))
            started = []
            wall, runs = median_run([ddplaunch, "--hosts", names, "--launcher", "local",
                                     "--fanout", str(k), "--rdzv-timeout", "300",
                                     "--log-level", "debug", "--", "/bin/true"],
                                    repeat, env=env, timeout=600)
            for r in runs:
                m = re.search(r"all \d+ nodes started, after (\d+) ms", r.stderr)
                if r.returncode != 0 or not m:
                    print(f"run failed (rc {r.returncode}): {r.stderr[-500:]}")
                    continue
                started.append(int(m.group(1)))
            shape = "flat" if k >= hosts else "tree"
            s = f"{statistics.median(started)} ms" if started else "n/a"
            print(f"| {cost} ms | {k} ({shape}) | {s} | {wall:.2f} s |")
    print()


def over_ssh(ddplaunch, repeat):
    import netns
    import sshd
    why = netns.available() or sshd.available()
    if why:
        print(f"## Over ssh: skipped ({why})")
        return
    if subprocess.run(["which", "mpirun"], capture_output=True).returncode != 0:
        print("## Over ssh: skipped (no mpirun)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        hosts = sshd.SshHosts(4, tmp)
        try:
            hostlist = ",".join(f"{n}:4" for n in hosts.names)
            ours = [ddplaunch, "--hosts", hostlist, "--ssh-args", hosts.ssh_args]
            rsh = f"ssh {hosts.ssh_args} -o BatchMode=yes"
            theirs = ["mpirun", "--allow-run-as-root", "-H", hostlist, "--mca", "plm_rsh_agent",
                      rsh, "--mca", "oob_tcp_if_include", f"{hosts.subnet}.0/24",
                      "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include",
                      f"{hosts.subnet}.0/24"]
            print("## Over ssh: 4 network-namespace hosts with sshd, 4 workers each")
            print("| launcher | 4 x 4 /bin/true (median wall) | one rank exits 7, 15 sleep: "
                  "time to exit | exit code |")
            print("|---|---|---|---|")
            fail = ["sh", "-c", 'r=${RANK:-$OMPI_COMM_WORLD_RANK}; [ "$r" = 5 ] && exit 7; '
                    'exec sleep 60']
            for name, cmd in (("ddplaunch --hosts", ours), ("mpirun -H", theirs)):
                wall, runs = median_run(cmd + ["/bin/true"], repeat)
                ok = all(r.returncode == 0 for r in runs)
                fwall, fruns = median_run(cmd + fail, max(1, repeat // 2), timeout=120)
                codes = sorted({r.returncode for r in fruns})
                print(f"| {name} | {wall * 1000:.0f} ms{'' if ok else ' (failed)'} | "
                      f"{fwall * 1000:.0f} ms | {codes} |")
            print()
        finally:
            hosts.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-ssh", action="store_true")
    ap.add_argument("--hosts", type=int, default=1024)
    args = ap.parse_args()
    ddplaunch = os.path.abspath(os.path.join(args.build, "ddplaunch"))
    fanout(ddplaunch, args.repeat, args.hosts)
    if not args.skip_ssh:
        over_ssh(ddplaunch, args.repeat)


if __name__ == "__main__":
    main()
