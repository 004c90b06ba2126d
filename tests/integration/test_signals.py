"""A stop signal ends the job on every node at any phase: while agents wait for
each other, while workers run, while results are gathered, and when the store
host is frozen. Each agent exits 128+N long before any timeout could end it."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import alive, all_stopped, free_port, parent_of, read_until, wait_until, worker

# Timeouts far longer than the waits below: an agent that only stopped when one
# of them passed would fail the test.
SLOW = ["--rdzv-timeout", "300", "--heartbeat-interval", "0.2", "--heartbeat-timeout", "60",
        "--term-timeout", "300"]
PROMPT = 20  # seconds: generous for a loaded machine, far below every timeout above


def agent(jobs, port, nnodes, node_rank, steps, nproc=1, debug=True):
    args = ["--nnodes", nnodes, "--nproc-per-node", nproc, "--master-port", port, *SLOW]
    if node_rank is not None:
        args += ["--node-rank", node_rank]
    if debug:
        args += ["--log-level", "debug"]
    return jobs.start(args + ["--", *worker(*steps)])


def exits(proc):
    """(exit code, stderr, seconds it took) once `proc` ends."""
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=PROMPT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after {PROMPT} s; its stderr:\n{err}")
    return proc.returncode, err, time.monotonic() - start


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_the_store_host_while_it_waits_for_nodes(jobs, sig):
    port = free_port()
    host = agent(jobs, port, 2, 0, ["out=never"])
    # Hosting the store, waiting for node 1: said by this agent itself (under
    # ctest -j2 another test's process could be the one accepting on the port,
    # and a signal sent before this agent blocks it would kill it outright).
    seen = read_until(host.stderr, "hosting the store")
    assert seen and "hosting the store" in seen[-1], seen
    assert wait_until(lambda: _accepts(port))
    host.send_signal(sig)
    rc, err, _ = exits(host)
    assert rc == 128 + sig, "".join(seen) + err
    assert f"received {signal.Signals(sig).name}" in err
    assert "while waiting for the other nodes" in err


@pytest.mark.parametrize("target,sig", [(1, signal.SIGINT), (1, signal.SIGTERM), (0, signal.SIGTERM)])
def test_signal_while_waiting_ends_rendezvous_on_every_node(jobs, target, sig):
    port = free_port()
    host = agent(jobs, port, 3, 0, ["out=never"])
    other = agent(jobs, port, 3, 1, ["out=never"])
    read_until(host.stderr, "node 1 (")  # node 1 joined; both wait for node 2
    procs = [host, other]
    procs[target].send_signal(sig)
    for p in procs:
        rc, err, _ = exits(p)
        assert rc == 128 + sig, err
        assert "received " + signal.Signals(sig).name in err, err


def test_signal_while_connecting_to_a_store_that_is_not_there(jobs):
    port = free_port()
    p = agent(jobs, port, 2, 1, ["out=never"], debug=False)
    # It retries until --rdzv-timeout, and says so every 5 s.
    lines = read_until(p.stderr, f"connecting to the store at 127.0.0.1:{port} (attempt ")
    assert lines and "s)" in lines[-1], lines
    p.send_signal(signal.SIGINT)
    rc, err, _ = exits(p)
    assert rc == 130, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_workers_run_ends_every_node(jobs, tmp_path, sig):
    port = free_port()
    procs = [agent(jobs, port, 2, n, [f"ready={tmp_path}", "sleep=300"], nproc=2, debug=False)
             for n in range(2)]
    assert wait_until(lambda: len([f for f in os.listdir(tmp_path) if f.startswith("ready.")]) == 4)
    procs[1].send_signal(sig)
    for p in procs:
        rc, err, _ = exits(p)
        assert rc == 128 + sig, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_results_are_gathered(jobs, tmp_path, sig):
    # Rank 0 fails at once; rank 1 (node 1) ignores SIGTERM, so node 1 sits in
    # its 300 s grace period and node 0 waits for its results.
    port = free_port()
    steps = ["trap=TERM", f"ready={tmp_path}", f"@0:waitfile={tmp_path / 'ready.1'}", "@0:exit=7",
             "sleep=300"]
    host = agent(jobs, port, 2, 0, steps)
    other = agent(jobs, port, 2, 1, steps)
    read_until(host.stderr, "waiting for every node's results")
    read_until(other.stdout, "caught SIGTERM")  # node 1 is in its grace period
    host.send_signal(sig)
    rc, err, _ = exits(host)
    assert rc == 128 + sig, err
    assert "job failed: rank 0 (node 0" in err, "the report keeps the root cause"
    assert f"received {signal.Signals(sig).name} while the job was ending" in err, err
    other.send_signal(sig)
    rc, err, _ = exits(other)
    assert rc == 128 + sig, err
    assert "job failed: rank 0 (node 0" in err, err


def test_frozen_store_host_does_not_delay_another_nodes_interrupt(jobs, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    pids.mkdir()
    procs = [agent(jobs, port, 2, n, [f"ready={tmp_path}", f"pidfile={pids}", "@2,3:out=pid",
                                      "sleep=300"], nproc=2)
             for n in range(2)]
    assert wait_until(lambda: len([f for f in os.listdir(tmp_path) if f.startswith("ready.")]) == 4)
    node1_workers = _worker_pids(procs[1])
    procs[0].send_signal(signal.SIGSTOP)
    try:
        assert wait_until(lambda: all_stopped(procs[0].pid))  # every thread, the store's too
        procs[1].send_signal(signal.SIGINT)
        rc, err, took = exits(procs[1])
        assert rc == 130, err
        assert took < 10, f"node 1 waited {took:.1f} s on the frozen store host"
        for pid in node1_workers:
            assert not alive(pid), f"node 1's worker {pid} is still running"
    finally:
        procs[0].send_signal(signal.SIGCONT)
    # Woken, node 0 reads node 1's verdict and ends the same way.
    rc, err, _ = exits(procs[0])
    assert rc == 130, err


def _accepts(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0





def _worker_pids(proc):
    """The pids of an agent's workers: the children of the agent, but its
    guard (a fork of the launcher, the same executable)."""
    out = []
    launcher_exe = os.readlink(f"/proc/{proc.pid}/exe")
    for pid in os.listdir("/proc"):
        if pid.isdigit() and parent_of(pid) == proc.pid:
            try:
                if os.readlink(f"/proc/{pid}/exe") != launcher_exe:
                    out.append(int(pid))
            except OSError:
                pass
    return out


def test_a_stop_signal_wins_over_the_deaths_it_causes(jobs, tmp_path):
    """scancel signals the launcher and every worker in no set order: the
    workers may die of SIGTERM before the launcher reads its own. The job was
    stopped by SIGTERM; no rank is to blame."""
    pids = tmp_path / "pids"
    pids.mkdir()
    p = jobs.start(["--nproc-per-node", 2, "--", *worker(f"pidfile={pids}", "sleep=300")])
    assert wait_until(lambda: len(os.listdir(pids)) == 2)
    for name in os.listdir(pids):
        os.kill(int(name), signal.SIGTERM)  # the workers first, as slurmstepd may
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "job stopped: ddplaunch received SIGTERM" in err, err
    assert "job failed" not in err, err


def test_a_preemption_signal_on_one_node_checkpoints_every_rank_everywhere(jobs, tmp_path):
    """--preempt-signal USR1 sent to node 1's launcher alone: every rank of
    both nodes gets SIGUSR1, checkpoints and exits 0, and both launchers exit
    75 (preempted: requeue it), with the ranks' state "preempted"."""
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--nproc-per-node", 2, "--master-port", port,
                         "--rdzv-timeout", 60, "--preempt-signal", "USR1",
                         "--summary-json", tmp_path / f"s{n}.json", "--",
                         *worker("checkpoint=USR1", f"ready={tmp_path}", "sleep=300")])
             for n in range(2)]
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 4, timeout=60)
    procs[1].send_signal(signal.SIGUSR1)
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 75, err
        assert out.count("checkpointed on SIGUSR1") == 2, out
        assert "job preempted: node 1" in err and "(--preempt-signal)" in err, err
    s = json.loads((tmp_path / "s0.json").read_text())
    assert s["stop_reason"] == "preempted" and s["exit_code"] == 75
    assert sorted(r["state"] for r in s["ranks"]) == ["preempted"] * 4, s["ranks"]


def test_a_rank_that_ignores_the_preemption_is_killed_after_the_term_timeout(jobs, tmp_path):
    p = jobs.start(["--preempt-signal", "SIGUSR2", "--term-timeout", 1, "--",
                    *worker("trap=USR2", f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: list(tmp_path.glob("ready.*")), timeout=60)
    p.send_signal(signal.SIGUSR2)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 75, err
    assert "caught SIGUSR2" in out and "killed by signal SIGKILL" in err, (out, err)


def test_preempt_signal_takes_only_signals_ddplaunch_handles(jobs):
    r = jobs.run(["--preempt-signal", "SEGV", "--", "true"])
    assert r.returncode == 2 and "--preempt-signal takes USR1, USR2, TERM" in r.stderr, r.stderr
