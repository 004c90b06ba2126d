"""One command for a job across hosts: `ddplaunch --hosts`/`--hostfile` on
this machine starts an agent on each host over real ssh (an OpenSSH server
in each network-namespace host, sshd.py), prints every rank's lines, and
exits with the job's code; nothing is left running on any host, whatever
happens to the launching command."""
import os
import re
import signal
import subprocess

import pytest

import netns
import sshd
from conftest import (BIN, SOURCE_DIR, TORCH_PYTHON, WORKER, env_lines, needs_torch, read_until,
                      parent_of, wait_until, worker)

why_not = netns.available() or sshd.available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=str(why_not))

PREFIX = ["--prefix", "[rank {rank}]: "]


@pytest.fixture
def ssh_hosts(tmp_path):
    made = []

    def make(count=3, **kwargs):
        h = sshd.SshHosts(count, tmp_path, **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.remove()


def launch(jobs, hosts, args, hostlist=None, env=None, **kwargs):
    hostlist = hostlist or ",".join(hosts.names)
    return jobs.start(["--hosts", hostlist, "--ssh-args", hosts.ssh_args,
                       "--rdzv-timeout", 60, *args], env=env, **kwargs)


def nothing_left(hosts):
    return all(not hosts.processes(h) for h in hosts.names)


def test_a_hostfile_with_slots_runs_one_job_across_three_hosts(jobs, ssh_hosts, tmp_path):
    hosts = ssh_hosts(3)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# the lab's machines\nnode0 slots=2\n\nnode1 slots=1  # small one\n"
                        "node2 slots=3\n")
    p = jobs.start(["--hostfile", hostfile, "--ssh-args", hosts.ssh_args, *PREFIX, "--",
                    *worker("env")])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    envs = env_lines(out)
    assert sorted(envs) == list(range(6)), out
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"6"}
    by_node = {}
    for e in envs.values():
        by_node.setdefault(e["GROUP_RANK"], []).append(int(e["LOCAL_RANK"]))
        assert e["MASTER_ADDR"] in ("node0", hosts.addrs["node0"]), e
    assert {k: sorted(v) for k, v in by_node.items()} == {"0": [0, 1], "1": [0], "2": [0, 1, 2]}
    assert nothing_left(hosts)


def test_the_default_prefix_names_each_rank_host(jobs, ssh_hosts):
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--", *worker("out=hello")])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert sorted(out.splitlines()) == ["[node0 rank 0]: hello", "[node1 rank 1]: hello"], out


@needs_torch
def test_real_pytorch_across_hosts_from_one_command(jobs, ssh_hosts):
    hosts = ssh_hosts(2)
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    p = launch(jobs, hosts, ["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--", example, 2],
               hostlist="node0,node1")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    lines = [l for l in out.splitlines() if "replicas" in l]
    assert len(lines) == 4 and all("/4: all-reduce" in l for l in lines), out


def test_a_host_that_refuses_ssh_is_named_and_nothing_is_left_elsewhere(jobs, ssh_hosts):
    hosts = ssh_hosts(3, without_sshd=("node2",))
    p = launch(jobs, hosts, ["--", *worker("sleep=60")])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, err
    assert "node 2 (node2, over ssh) could not be started: ssh could not reach node2" in err, err
    assert "Connection refused" in err, err
    # The command's line is the story: no node tells of a SIGTERM the user
    # did not send, nor of an exit code the command does not exit with.
    assert "SIGTERM" not in err and "exit code 143" not in err, err
    assert "could not be started" in err.strip().splitlines()[-1], err
    # The channel between the command and its agents stays between them.
    assert "ddplaunch-agent" not in out + err, (out, err)
    assert wait_until(lambda: nothing_left(hosts), timeout=30), \
        {h: hosts.processes(h) for h in hosts.names}


def test_the_launching_command_killed_leaves_nothing_on_any_host(jobs, ssh_hosts, tmp_path):
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--nproc-per-node", 2, "--", *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 4, timeout=60)
    p.kill()
    p.wait()
    assert wait_until(lambda: nothing_left(hosts), timeout=30), \
        {h: hosts.processes(h) for h in hosts.names}


def test_ctrl_c_ends_the_job_on_every_host(jobs, ssh_hosts, tmp_path):
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--", *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 2, timeout=60)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "SIGINT" in err, err
    assert wait_until(lambda: nothing_left(hosts), timeout=30)


def test_x_and_env_forward_choose_what_reaches_remote_workers(jobs, ssh_hosts):
    hosts = ssh_hosts(2)
    env = {"NCCL_DEBUG": "INFO", "MY_SETTING": "from here", "OTHER_SETTING": "kept here",
           "LAB_A": "1", "LAB_B": "2"}
    p = launch(jobs, hosts, ["-x", "MY_SETTING", "-x", "SET_BY_X=a b'c", "--env-forward",
                             "LAB_*", *PREFIX, "--", *worker("env")], env=env)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    envs = env_lines(out)
    assert sorted(envs) == [0, 1]
    for e in envs.values():
        assert e["NCCL_DEBUG"] == "INFO"  # a default pattern
        assert e["MY_SETTING"] == "from here" and e["SET_BY_X"] == "a b'c"
        assert e["LAB_A"] == "1" and e["LAB_B"] == "2"
        assert "OTHER_SETTING" not in e
        assert "DDPLAUNCH_RDZV_TOKEN" not in e


def test_a_program_missing_on_one_host_fails_the_job_with_127_naming_it(jobs, ssh_hosts, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    prog = bindir / "train"
    prog.write_text("#!/bin/sh\nexec sleep 60\n")
    prog.chmod(0o755)
    hosts = ssh_hosts(2, hidden={"node1": str(bindir)})
    p = launch(jobs, hosts, ["--", str(prog)])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 127, err
    assert str(prog) in err and "node 1" in err, err
    assert wait_until(lambda: nothing_left(hosts), timeout=30)


def test_a_missing_remote_ddplaunch_is_named(jobs, ssh_hosts):
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--remote-ddplaunch", "/nonexistent/ddplaunch", "--",
                             *worker("sleep=60")])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, err
    assert "ddplaunch is not found on node0" in err or "ddplaunch is not found on node1" in err, err
    assert wait_until(lambda: nothing_left(hosts), timeout=30)


def test_a_token_never_appears_in_a_process_list(jobs, ssh_hosts, tmp_path):
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--", *worker(f"ready={tmp_path}", f"waitfile={tmp_path}/go")],
               env={"DDPLAUNCH_RDZV_TOKEN": "s3cret-token-of-this-job"})
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 2, timeout=60)
    cmdlines = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdlines.append(f.read())
            except OSError:
                pass
    (tmp_path / "go").write_text("")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert not [c for c in cmdlines if b"s3cret" in c]


def test_an_ssh_connection_that_drops_mid_job_ends_the_job_everywhere(jobs, ssh_hosts, tmp_path):
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--", *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 2, timeout=60)
    ssh = [pid for pid in _children(p.pid) if _cmdline(pid).startswith(b"ssh\0")
           and b"\0node1\0" in _cmdline(pid)]
    assert len(ssh) == 1
    os.kill(ssh[0], signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0, err
    assert wait_until(lambda: nothing_left(hosts), timeout=30), \
        {h: hosts.processes(h) for h in hosts.names}


def test_a_connection_the_remote_end_drops_is_named_with_ssh_s_own_words(jobs, ssh_hosts, tmp_path):
    """node1's sshd session dies (a reboot, an OOM kill): ssh says "Connection
    to node1 closed by remote host."; that line, not the agent's last log
    line, is the reason given, and one report (node 0's) speaks for the job:
    node2 hears of node1's loss too, and adds nothing."""
    hosts = ssh_hosts(3)
    p = launch(jobs, hosts, ["--", *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 3, timeout=60)
    # The sessions: sshd processes whose parent is sshd (the listener).
    sessions = [int(pid) for pid in subprocess.run(
        ["ip", "netns", "pids", hosts.namespaces["node1"]], capture_output=True,
        text=True).stdout.split()
        if _comm(int(pid)) == "sshd" and _comm(parent_of(int(pid)) or 0) == "sshd"]
    assert sessions
    for pid in sessions:
        os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0, err
    dropped = [l for l in err.splitlines() if "ssh connection to" in l and "dropped" in l]
    assert len(dropped) == 1 and "(ddplaunch:" not in dropped[0], err
    assert "closed by remote host" in dropped[0], err
    assert err.count("ddplaunch: exit code") == 1, err
    assert "job stopped: node 1 (node1) lost its connection to the launching command" in err, err
    assert wait_until(lambda: nothing_left(hosts), timeout=30), \
        {h: hosts.processes(h) for h in hosts.names}


def test_node_0_s_host_dying_mid_job_gives_one_report_naming_it(jobs, ssh_hosts, tmp_path):
    """node0 loses power mid-job: no packet leaves it again, nothing there
    runs. The other nodes hear nothing from the store until their heartbeat
    timeout; the launching command then prints one report naming node0,
    not one per surviving node."""
    hosts = ssh_hosts(3)
    p = launch(jobs, hosts, ["--", *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 3, timeout=60)
    ns = hosts.namespaces["node0"]
    subprocess.run(["ip", "-n", ns, "link", "set", "eth0", "down"], check=True)
    for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    out, err = p.communicate(timeout=120)
    assert p.returncode == 4, err
    assert err.count("ddplaunch: exit code") == 1, err
    assert "ddplaunch: job failed: node 0 (node0, over ssh) was lost" in err, err
    assert "lost contact with the store" in err, err
    assert "ddplaunch-agent" not in out + err, (out, err)
    assert "stopping them" not in err, err  # the report says it all
    assert wait_until(lambda: nothing_left(hosts), timeout=30), \
        {h: hosts.processes(h) for h in hosts.names}


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


MPI_HELLO = os.environ.get("DDPLAUNCH_MPI_HELLO")


@pytest.mark.skipif(not MPI_HELLO, reason="the MPI helper was not built (libopenmpi-dev)")
def test_an_mpi_program_across_hosts_is_one_world(jobs, ssh_hosts):
    """Each host's agent is its workers' PMIx server; Open MPI's TCP runs on
    the veth the hosts reach each other by."""
    hosts = ssh_hosts(2)
    p = launch(jobs, hosts, ["--nproc-per-node", 2, "--", MPI_HELLO, "hosts"],
               hostlist="node0,node1")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    lines = sorted(l.split("]: ", 1)[1] for l in out.splitlines() if "mpi rank" in l)
    assert lines == [f"mpi rank {r} size 4 sum 6 from {(r + 3) % 4} RANK={r}"
                     for r in range(4)], out
    # Every node's server names every node by its host name (node 0's plan
    # carries them), so that each rank sees where each of the others runs.
    seen = sorted(l.split("]: ", 1)[1] for l in out.splitlines() if "sees hosts" in l)
    assert seen == [f"rank {r} sees hosts node0 node0 node1 node1" for r in range(4)], out
    assert nothing_left(hosts)


@pytest.mark.skipif(not MPI_HELLO, reason="the MPI helper was not built (libopenmpi-dev)")
def test_the_users_open_mpi_settings_reach_every_remote_rank(jobs, ssh_hosts):
    """As mpirun forwards OMPI_MCA_*: orte_* ones too, with nothing typed."""
    hosts = ssh_hosts(2)
    settings = {"OMPI_MCA_orte_base_help_aggregate": "0", "OMPI_MCA_mpi_yield_when_idle": "1"}
    p = launch(jobs, hosts, ["--nproc-per-node", 2, "--", MPI_HELLO, "show:" + ",".join(settings)],
               hostlist="node0,node1", env=settings)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    for name, value in settings.items():
        seen = {int(m[1]): m[2] for m in re.finditer(rf"rank (\d+) .*\b{name}=(\S+)", out)}
        assert seen == {r: value for r in range(4)}, out
    assert nothing_left(hosts)


def test_two_jobs_on_the_same_hosts_at_once_both_run(jobs, ssh_hosts, tmp_path):
    """Node 0 is a remote host and nobody chose a port: its agent picks one
    free there and every other agent is told it, so a second job beside the
    first gets its own store (mpirun users never choose ports)."""
    hosts = ssh_hosts(2)
    gate = tmp_path / "gate"
    # Job A's ranks wait until job B has run: the two overlap.
    first = launch(jobs, hosts, ["--nproc-per-node", 1, "--", "sh", "-c",
                                 f"while [ ! -e {gate} ]; do sleep 0.05; done; echo A done"])
    second = launch(jobs, hosts, ["--nproc-per-node", 1, "--", "sh", "-c", "echo B done"])
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.count("B done") == 2, out
    gate.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert out.count("A done") == 2, out
    assert "refused" not in err and "Address already in use" not in err, err
    assert nothing_left(hosts)
