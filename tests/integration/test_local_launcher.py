"""One command for several agents on this machine: `--launcher local` (every
agent here: tests, benchmarks, simulations) and a host list naming this
machine (its agent runs without ssh). The same launching command as over
ssh: the channel, the relayed lines, the signals, the job's code, the tree
of --fanout."""
import errno
import os
import re
import signal
import socket

import pytest

from conftest import WORKER, env_lines, read_until, wait_until, worker

PREFIX = ["--prefix", "[rank {rank}]: "]
# ssh would fail at once: proof that a local host is never reached through it.
NO_SSH = ["--ssh-args", "-o ProxyCommand=false"]


def test_this_host_in_the_list_runs_without_ssh(jobs):
    r = jobs.run(["--hosts", "localhost:2,127.0.0.1:1", *NO_SSH, *PREFIX, "--", *worker("env")])
    assert r.returncode == 0, r.stderr
    envs = env_lines(r.stdout)
    assert sorted(envs) == [0, 1, 2]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"3"}


def test_local_launcher_relays_every_line_and_the_failing_rank_code(jobs):
    r = jobs.run(["--hosts", "a:2,b:2,c:2", "--launcher", "local", "--", *worker("lines=200",
                                                                                 "exit=0")])
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 6 * 200
    r = jobs.run(["--hosts", "a:2,b:2", "--launcher", "local", "--", "sh", "-c",
                  '[ "$RANK" = 3 ] && exit 7; exec sleep 60'])
    assert r.returncode == 7, r.stderr
    # One report, node 0's, for the whole job.
    assert r.stderr.count("job failed: rank 3") == 1, r.stderr


def test_a_tree_of_launchers_runs_every_node_and_ends_with_the_code(jobs):
    hosts = ",".join(f"h{i}" for i in range(9))
    r = jobs.run(["--hosts", hosts, "--launcher", "local", "--fanout", 2, *PREFIX, "--",
                  *worker("env")])
    assert r.returncode == 0, r.stderr
    envs = env_lines(r.stdout)
    assert sorted(envs) == list(range(9))
    assert sorted(int(e["GROUP_RANK"]) for e in envs.values()) == list(range(9))
    r = jobs.run(["--hosts", hosts, "--launcher", "local", "--fanout", 2, "--", "sh", "-c",
                  '[ "$RANK" = 7 ] && exit 5; exec sleep 60'])
    assert r.returncode == 5, r.stderr


def test_killing_the_root_of_a_tree_leaves_nothing(jobs, tmp_path):
    hosts = ",".join(f"h{i}" for i in range(7))
    p = jobs.start(["--hosts", hosts, "--launcher", "local", "--fanout", 2, "--",
                    *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 7, timeout=60)
    p.kill()
    p.wait()
    # The jobs fixture fails the test if any process of the job is left.


def test_ctrl_c_during_a_slow_start_stops_what_started_and_starts_no_more(jobs, tmp_path):
    p = jobs.start(["--hosts", "a,b,c,d", "--launcher", "local", "--", *worker(f"ready={tmp_path}",
                                                                              "sleep=300")],
                   env={"DDPLAUNCH_SIM_CONNECT_MS": "1500"})
    # The progress line names who is awaited.
    line = ""
    while "connected, waiting for" not in line:
        line = p.stderr.readline()
        assert line, "no progress line"
    assert "local: " in line and "/4 connected" in line, line
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert len(list(tmp_path.glob("ready.*"))) < 4


def test_ctrl_c_on_the_launching_command_is_reported_as_the_commands(jobs, tmp_path):
    """The command relays Ctrl-C to every agent; the report says the command
    received it, not one of the nodes (which used to differ run to run)."""
    p = jobs.start(["--hosts", "a,b,c", "--launcher", "local", "--",
                    *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 3, timeout=60)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "job stopped: the launching command received SIGINT" in err, err
    assert not re.search(r"node \d \([^)]*\) received SIGINT", err), err


def test_a_node_failing_its_health_check_is_named_once_and_the_command_exits_5(jobs, tmp_path):
    """The first node to run the check fails it (whichever that is): one
    error line names it, its check's output names it, and the command exits
    5 as README documents, not 3 (the other nodes' code)."""
    check = f"mkdir {tmp_path}/first 2>/dev/null && echo disk failing && exit 1; exit 0"
    r = jobs.run(["--hosts", "a,b,c", "--launcher", "local", "--health-check", check, "--",
                  "true"], timeout=60)
    assert r.returncode == 5, r.stderr
    errors = [l for l in r.stderr.splitlines() if "failed its health check" in l]
    assert len(errors) == 1, r.stderr
    m = re.match(r"ddplaunch: error: node (\d) \([^)]*\) failed its health check: .*disk failing$",
                 errors[0])
    assert m, r.stderr
    assert f"ddplaunch: warning: health check on node {m.group(1)} (" in r.stderr, r.stderr


def test_a_spare_that_comes_after_a_short_job_ended_does_not_change_its_exit_code(jobs):
    """--hosts with one host beyond --nnodes 2:2: the job (true) is over
    before the third host's agent starts (each start 1.5 s after the one
    before); that spare finds no job, and the command still exits 0."""
    r = jobs.run(["--hosts", "a,b,c", "--nnodes", "2:2", "--launcher", "local", "--", "true"],
                 env={"DDPLAUNCH_SIM_CONNECT_MS": "1500"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "error" not in r.stderr, r.stderr


def test_node_0s_store_port_is_held_from_the_pick_until_the_job_ends(jobs):
    """The launching command picks node 0's store port when node 0 is this
    host, and holds it: another launcher picking a port meanwhile (a bind
    without SO_REUSEADDR) cannot take it while node 0's agent starts, and
    node 0's store still binds it. Each start is delayed 1.5 s (a simulated
    ssh connection) so that the port is tried before any agent exists."""
    p = jobs.start(["--log-level", "debug", "--hosts", "a,b", "--launcher", "local", "--",
                    "true"], env={"DDPLAUNCH_SIM_CONNECT_MS": "1500"})
    line = ""
    while "node 0 is" not in line:
        line = p.stderr.readline()
        assert line, "no line naming node 0's address"
    port = int(line.strip().rsplit(":", 1)[1])
    with socket.socket() as other:
        with pytest.raises(OSError) as taken:
            other.bind(("0.0.0.0", port))
        assert taken.value.errno == errno.EADDRINUSE
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err


def test_hosts_and_hostfile_errors_are_one_line_usage_errors(jobs, tmp_path):
    cases = [
        (["--hosts", "a:0"], "--hosts: 'a:0' has no valid slot count"),
        (["--hosts", "a,b", "--node-rank", "1"], "--node-rank cannot be given with --hosts"),
        (["--hosts", "a,b", "--nnodes", "3"], "--nnodes 3 does not match the 2 hosts"),
        (["--hostfile", tmp_path / "missing"], "cannot read it"),
        (["-x", "1BAD"], "-x takes VAR or VAR=value"),
        (["--launcher", "pdsh"], "--launcher takes ssh, srun, local or auto"),
        (["--launcher", "srun"], "not a Slurm allocation"),
    ]
    for args, message in cases:
        r = jobs.run([*args, "--", "true"])
        assert r.returncode == 2, (args, r.stderr)
        errors = [l for l in r.stderr.splitlines() if l.startswith("ddplaunch: error:")]
        assert len(errors) == 1 and message in errors[0], (args, r.stderr)


def test_dry_run_prints_each_agent_command_and_starts_nothing(jobs):
    r = jobs.run(["--hosts", "n0:4,n1:2", "--dry-run", "--", "train.py"])
    assert r.returncode == 0, r.stderr
    assert "node 0 (n0, over ssh): ssh " in r.stdout and "--nproc-per-node=4" in r.stdout
    assert "node 1 (n1, over ssh): ssh " in r.stdout and "--node-rank=1" in r.stdout


def test_a_slow_console_loses_no_line_of_any_host(jobs):
    """120 MB through the launching command into a pipe read only after 2 s:
    the relay waits for the console (and the agents for it), nothing is
    dropped."""
    p = jobs.start(["--hosts", "a:2,b:2", "--launcher", "local", "--no-prefix", "--",
                    *worker("flood=30000000")])
    import time
    time.sleep(2)  # the reader is slow on purpose: not a synchronisation
    total = 0
    while True:
        chunk = p.stdout.read(1 << 20)
        if not chunk:
            break
        total += len(chunk)
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0, err
    assert "did not keep up" not in err, err
    assert total >= 4 * 30_000_000, total


def test_hosts_beyond_max_start_as_hot_spares_that_end_with_the_job(jobs, tmp_path):
    """--nnodes MIN:MAX with more hosts than MAX (it was refused): the extra
    host waits as a spare; the job never needs it, and it ends with the
    job's code, not 3."""
    gate = tmp_path / "gate"
    p = jobs.start(["--hosts", "a,b,c", "--nnodes", "2:2", "--launcher", "local", "--prefix",
                    "[rank {rank}]: ", "--", "sh", "-c",
                    f"while [ ! -e {gate} ]; do sleep 0.05; done; exec {WORKER} env"])
    # The job runs until the third host's agent waits as a spare (node 0 says so).
    seen = read_until(p.stderr, "it waits as a spare, for a lost node's place")
    assert seen and "waits as a spare" in seen[-1], seen
    gate.touch()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    envs = env_lines(out)
    assert sorted(envs) == [0, 1] and {e["WORLD_SIZE"] for e in envs.values()} == {"2"}, out
    r = jobs.run(["--hosts", "a,b,c", "--nnodes", "4:5", "--launcher", "local", "--", "true"])
    assert r.returncode == 2 and "--nnodes 4:5 does not match the 3 hosts" in r.stderr, r.stderr
