"""What no input, terminal or limit may break: rank 0 reading the terminal,
the fd limit on every node, durations that cannot be represented, paths and
hosts that cannot work, told before anything starts."""
import json
import os
import pathlib
import pty
import resource
import select
import shutil
import socket
import subprocess

import pytest

from conftest import BIN, alive, env_lines, free_port, wait_until, worker


def test_rank_zero_can_read_the_launchers_terminal(jobs, tmp_path):
    script = tmp_path / "ask.sh"
    script.write_text('#!/bin/sh\nread line\necho "rank $RANK read: $line"\n')
    script.chmod(0o755)
    pid, master = pty.fork()
    if pid == 0:  # the child is a session leader with the pty as its terminal
        os.execve(BIN, [BIN, "--nproc-per-node", "2", "--", str(script)], jobs.env())
    output = b""
    try:
        os.write(master, b"forty-two\n")
        while b"read: forty-two" not in output:
            ready, _, _ = select.select([master], [], [], 30)
            assert ready, f"rank 0 never read its input (stopped by SIGTTIN?): {output!r}"
            output += os.read(master, 4096)
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(master)
    assert b"rank 0 read: forty-two" in output


def test_workers_get_the_users_fd_limit_and_many_workers_fit(jobs):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip("the hard fd limit is too low to show anything")

    def low_soft_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))

    # 200 workers need 400 pipe fds in the launcher: more than the soft limit.
    p = subprocess.run([BIN, "--nproc-per-node", "200", "--ranks-filter", "0", "--", "sh", "-c",
                        "ulimit -Sn"], env=jobs.env(), preexec_fn=low_soft_limit,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[rank 0]: 128", "workers get the limit the user had"


@pytest.mark.parametrize("value", ["1e10", "inf", "nan", "-1", "1e400"])
def test_durations_that_cannot_be_represented_are_refused(jobs, value):
    r = jobs.run(["--term-timeout", value, "--", *worker()])
    assert r.returncode == 2
    assert "up to 315360000" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_same_flag_twice_takes_the_last_value(jobs):
    r = jobs.run(["--nproc-per-node", 3, "--nproc-per-node", 2, "--", *worker("env")])
    assert r.returncode == 0, r.stderr
    assert sorted(env_lines(r.stdout)) == [0, 1]


def test_an_unwritable_summary_path_is_refused_before_anything_starts(jobs, tmp_path):
    marker = tmp_path / "started"
    r = jobs.run(["--summary-json", tmp_path / "no" / "such" / "dir.json", "--", "touch", marker])
    assert r.returncode == 2
    assert "--summary-json" in r.stderr and "cannot write it" in r.stderr
    assert not marker.exists(), "the workers were started anyway"


def test_an_unresolvable_master_is_named(jobs):
    r = jobs.run(["--nnodes", 2, "--master-addr", "no-such-host.invalid", "--", *worker()])
    assert r.returncode == 2
    assert "cannot resolve --master-addr no-such-host.invalid" in r.stderr


def test_a_master_name_that_does_not_resolve_yet_is_waited_for(jobs):
    """A name that may exist later (a Kubernetes headless service whose pod
    is not up) is retried until --rdzv-timeout, saying so; then exit 3."""
    r = jobs.run(["--nnodes", 2, "--master-addr", "master-0.ddplaunch-test", "--rdzv-timeout", 1,
                  "--", *worker()], timeout=60)
    assert r.returncode == 3, r.stderr
    assert "waiting for --master-addr master-0.ddplaunch-test to resolve" in r.stderr, r.stderr
    assert "did not resolve within --rdzv-timeout 1 s" in r.stderr, r.stderr


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_bracketed_ipv6_endpoint(jobs):
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--rdzv-endpoint", f"[::1]:{port}", "--",
                         *worker("env")]) for n in (1, 0)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert {e["MASTER_ADDR"] for e in env_lines(out).values()} == {"::1"}


CHAIN = """#!/bin/sh
# Each level records its pid (and its error file) and starts the next in a new session.
echo $$ >> "$2"
echo "$TORCHELASTIC_ERROR_FILE" >> "$2.errfiles"
if [ "$1" -gt 0 ]; then setsid "$0" $(( $1 - 1 )) "$2" & fi
exec sleep 300
"""



@pytest.mark.parametrize("guard", ["cgroup", "process"])
def test_nothing_survives_a_sigkilled_launcher(jobs, tmp_path, guard):
    chain = tmp_path / "chain.sh"
    chain.write_text(CHAIN)
    chain.chmod(0o755)
    pids = tmp_path / "pids"
    env = {"DDPLAUNCH_GUARD": "process"} if guard == "process" else None
    p = jobs.start(["--nproc-per-node", 2, "--", chain, 6, pids], env=env)
    # Two workers, each a chain of seven processes, six of them setsid()ed.
    assert wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 14, timeout=30)
    p.kill()  # as the OOM killer or Slurm's final kill would
    p.wait()
    recorded = [int(x) for x in pids.read_text().split()]
    assert wait_until(lambda: not any(alive(pid) for pid in recorded), timeout=15), \
        [pid for pid in recorded if alive(pid)]
    # Nothing on disk either: the job's private directory (the workers' error
    # files, one per rank in it, no directory per rank) goes with the job.
    errfiles = set(pathlib.Path(tmp_path / "pids.errfiles").read_text().split())
    assert len(errfiles) == 2, errfiles
    job_dirs = {os.path.dirname(f) for f in errfiles}
    assert len(job_dirs) == 1, errfiles
    assert {os.path.basename(f) for f in errfiles} == {"0.json", "1.json"}
    assert wait_until(lambda: not any(os.path.exists(d) for d in job_dirs), timeout=15), job_dirs


@pytest.mark.parametrize("code", [0, 7])
def test_a_ranks_setsid_grandchild_is_gone_when_ddplaunch_returns(jobs, tmp_path, code):
    """README: "nothing is left running". A Slurm epilog, the next step or a
    script checking the GPUs runs right after ddplaunch returns; the guard's
    own sweep comes later (it waits for the launcher's exit first)."""
    pids = tmp_path / "pids"
    r = jobs.run(["--nproc-per-node", 2, "--", "sh", "-c",
                  f"( setsid sleep 300 > /dev/null 2>&1 & echo $! >> {pids} ); "
                  # both ranks' grandchildren started before either exits
                  f'while [ "$(wc -l < {pids})" -lt 2 ]; do sleep 0.01; done; exit {code}'])
    assert r.returncode == code, r.stderr
    grandchildren = [int(x) for x in pids.read_text().split()]
    assert len(grandchildren) == 2
    # At once: no wait.
    assert not [pid for pid in grandchildren if alive(pid)], "left running after ddplaunch returned"


def job_cgroup_parent():
    """The cgroup v2 directory a launcher started from here makes its job's
    cgroup in (this process's own) and its name in the hierarchy, or None
    where it cannot make one."""
    path = None
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            path = line[3:]
    if path is None:
        return None
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        kind = subprocess.run(["stat", "-f", "-c", "%T", mount], capture_output=True, text=True)
        parent = mount + ("" if path == "/" else path)
        if kind.stdout.strip() == "cgroup2fs" and os.path.isdir(parent):
            probe = os.path.join(parent, f"ddplaunch-probe-{os.getpid()}")
            try:
                os.mkdir(probe)
            except OSError:
                return None
            try:
                has_kill = os.path.exists(os.path.join(probe, "cgroup.kill"))
                return (parent, path.rstrip("/")) if has_kill else None
            finally:
                os.rmdir(probe)
    return None


def test_workers_start_in_the_jobs_own_cgroup_which_goes_with_the_job(jobs):
    found = job_cgroup_parent()
    if found is None:
        pytest.skip("no cgroup v2 with cgroup.kill that this user may make cgroups in")
    parent, name = found
    r = jobs.run(["--nproc-per-node", 2, "--no-prefix", "--", "sh", "-c",
                  'echo "$PPID $(grep ^0:: /proc/self/cgroup)"'])
    assert r.returncode == 0, r.stderr
    launcher = jobs.procs[-1].pid
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and {line.split()[0] for line in lines} == {str(launcher)}, r.stdout
    # Both in one cgroup of the job's own, beside the launcher's (not in it).
    assert {line.split(" ", 1)[1] for line in lines} == {f"0::{name}/ddplaunch-{launcher}"}, r.stdout
    # The guard removes it once the launcher has gone.
    directory = os.path.join(parent, f"ddplaunch-{launcher}")
    assert wait_until(lambda: not os.path.exists(directory), timeout=15), directory


def test_the_next_job_removes_the_empty_cgroup_a_killed_launcher_left(jobs):
    """A launcher SIGKILLed together with its guard leaves its empty job
    cgroup: the guard of a later job on the node removes it, and leaves the
    cgroup of a launcher that still runs."""
    found = job_cgroup_parent()
    if found is None:
        pytest.skip("no cgroup v2 with cgroup.kill that this user may make cgroups in")
    parent = found[0]
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = os.path.join(parent, f"ddplaunch-{gone.pid}")
    running = os.path.join(parent, f"ddplaunch-{os.getpid()}")  # this test is alive
    os.mkdir(stale)
    os.mkdir(running)
    try:
        r = jobs.run(["--nproc-per-node", 1, "--", "true"])
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: not os.path.exists(stale), timeout=15), stale
        assert os.path.isdir(running)
    finally:
        for d in (stale, running):
            if os.path.isdir(d):
                os.rmdir(d)


def test_a_finished_job_leaves_no_directory_behind(jobs, tmp_path):
    """The workers' error files live in one private directory, removed when
    the launcher ends, whether the job succeeded or a rank failed and wrote
    its error file."""
    for program in (["sh", "-c", "echo $TORCHELASTIC_ERROR_FILE"],
                    ["sh", "-c", 'echo $TORCHELASTIC_ERROR_FILE; '
                     'echo \'{"message": "boom"}\' > "$TORCHELASTIC_ERROR_FILE"; exit 3']):
        r = jobs.run(["--nproc-per-node", 2, "--", *program])
        assert r.returncode == (0 if program[-1].endswith("ERROR_FILE") else 3), r.stderr
        paths = {line.split(": ", 1)[1] for line in r.stdout.splitlines() if ": " in line}
        # (when rank 0 fails first, rank 1 may be stopped before it prints)
        assert len(paths) == 2 or (r.returncode == 3 and paths), r.stdout
        assert len({os.path.dirname(p) for p in paths}) == 1, paths
        assert all(not os.path.exists(os.path.dirname(p)) for p in paths), paths
        if r.returncode == 3:
            assert "boom" in r.stderr, r.stderr  # the error file was read before it went


def test_the_job_directory_goes_in_tmpdir_or_else_in_memory(jobs, tmp_path):
    """Where the user set TMPDIR, the job's private directory goes there;
    unset, it goes in /dev/shm where that is a tmpfs (docs/ENVIRONMENT.md)."""
    program = ["--nproc-per-node", 1, "--no-prefix", "--", "sh", "-c", "echo $TORCHELASTIC_ERROR_FILE"]
    r = jobs.run(program, env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.startswith(f"{tmp_path}/ddplaunch-job-"), r.stdout + r.stderr
    env = jobs.env()
    env.pop("TMPDIR", None)
    r = subprocess.run([BIN, *map(str, program)], env=env, capture_output=True, text=True, timeout=120)
    in_memory = subprocess.run(["stat", "-f", "-c", "%T", "/dev/shm"], capture_output=True,
                               text=True).stdout.strip() == "tmpfs"
    parent = "/dev/shm" if in_memory and os.access("/dev/shm", os.W_OK) else "/tmp"
    assert r.returncode == 0 and r.stdout.startswith(f"{parent}/ddplaunch-job-"), r.stdout + r.stderr
    assert not os.path.exists(os.path.dirname(r.stdout.strip()))


def _two_nodes(jobs, program, node1_args=(), node0_kwargs=None, node1_kwargs=None):
    """Two nodes with two workers each running `program`. The heartbeat
    timeout (300 s) is far beyond the waits: only node 1's own word can end
    node 0 in time."""
    port = free_port()
    common = ["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port,
              "--heartbeat-timeout", 300, "--rdzv-timeout", 300]
    node0 = jobs.start(common + ["--node-rank", 0, "--", *program], **(node0_kwargs or {}))
    node1 = jobs.start(common + ["--node-rank", 1, *node1_args, "--", *program], **(node1_kwargs or {}))
    _, err1 = node1.communicate(timeout=60)
    _, err0 = node0.communicate(timeout=60)
    return node0.returncode, err0, node1.returncode, err1


def test_a_program_missing_on_one_node_ends_every_node_at_once(jobs, tmp_path):
    for name in ("has", "lacks"):
        (tmp_path / name).mkdir()
    shutil.copy("/bin/sleep", tmp_path / "has" / "sleep")
    rc0, err0, rc1, err1 = _two_nodes(jobs, ["./sleep", 300], node0_kwargs={"cwd": tmp_path / "has"},
                                      node1_kwargs={"cwd": tmp_path / "lacks"})
    assert rc1 == 127 and "cannot execute './sleep'" in err1, err1
    assert rc0 == 127, err0
    assert "node 1 (" in err0 and "cannot execute './sleep'" in err0, err0


def test_a_node_the_system_refuses_pipes_ends_every_node_at_once(jobs):
    # 32: the agent, its store connection, its PMIx server and its
    # preflight fit; 16 workers' pipes (3 each) do not. (At 24, a sanitizer
    # build ran out first inside UBSan's own check, which opens a pipe to
    # test that memory is readable, and reported a false "invalid vptr".)
    def few_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
    rc0, err0, rc1, err1 = _two_nodes(jobs, ["sleep", 300], node1_args=["--nproc-per-node", 16],
                                      node1_kwargs={"preexec_fn": few_fds})
    assert rc1 == 1, err1
    assert "Too many open files; raise the open-file limit (ulimit -n)" in err1, err1
    assert rc0 == 1, err0
    assert "node 1 (" in err0 and "could not start its workers" in err0, err0


def test_a_node_that_breaks_mid_run_ends_every_node_at_once_and_leaves_nothing(jobs, tmp_path):
    # DDPLAUNCH_FAULT=output: node 1's loop fails with an internal error at
    # its worker's first output, once every worker of both nodes runs.
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    program = [*worker(f"pidfile={pid_dir}", f"ready={tmp_path}", f"waitfile={tmp_path}/go",
                       "out=started", "sleep=300")]
    port = free_port()
    common = ["--nnodes", 2, "--master-port", port, "--heartbeat-timeout", 300]
    node0 = jobs.start(common + ["--node-rank", 0, "--nproc-per-node", 2, "--", *program])
    node1 = jobs.start(common + ["--node-rank", 1, "--nproc-per-node", 1, "--", *program],
                       env=dict(os.environ, DDPLAUNCH_FAULT="output"))
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 3, timeout=60)
    (tmp_path / "go").write_text("")
    _, err1 = node1.communicate(timeout=60)
    _, err0 = node0.communicate(timeout=60)
    assert node1.returncode == 1, err1
    assert "internal error" in err1 and "DDPLAUNCH_FAULT=output" in err1, err1
    assert node0.returncode == 1, err0
    assert "node 1 (" in err0 and "hit an internal error" in err0, err0
    # Node 1 reported that it has no outcomes: node 0 did not wait for them
    # (it used to, for 30 s, then warned).
    assert "not every node reported" not in err0, err0
    pids = [int(p.name) for p in pid_dir.iterdir()]
    assert len(pids) == 3
    assert wait_until(lambda: not any(alive(pid) for pid in pids), timeout=30), "a worker survived"


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 12000,
                    reason="4,096 workers need about 8,200 fds in the launcher")
@pytest.mark.skipif(os.environ.get("DDPLAUNCH_SANITIZE") == "thread",
                    reason="ThreadSanitizer turns vfork into fork: 4,096 forks take minutes")
def test_four_thousand_workers_on_one_node(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 4096, "--summary-json", tmp_path / "s.json", "--", "true"],
                 timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with open(tmp_path / "s.json") as f:
        summary = json.load(f)
    assert len(summary["ranks"]) == 4096
    assert all(rank["state"] == "succeeded" for rank in summary["ranks"])
    if not os.environ.get("DDPLAUNCH_SANITIZE"):  # sanitizers keep freed memory
        rss_kib = summary["launcher_max_rss_kib"]
        assert rss_kib < 4096 * 8 + 16 * 1024, f"{rss_kib} KiB: more than 8 KiB per worker"
