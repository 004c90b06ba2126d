"""--health-check: each node runs the user's command before it joins. A node
whose check fails (or runs past --health-check-timeout) does not join: alone
it ends with exit 5; in a fixed-size job every node ends at once, naming the
node and the check's last line; an elastic job goes on without it."""
import json
import subprocess
import sys

from conftest import free_port, read_until


def test_a_failing_check_ends_a_one_node_job_before_any_worker_starts(jobs, tmp_path):
    ran = tmp_path / "ran"
    r = jobs.run(["--nproc-per-node", 2, "--summary-json", tmp_path / "s.json",
                  "--health-check", 'echo "checking disks"; echo "/scratch is read-only" >&2; exit 4',
                  "--", "touch", ran])
    assert r.returncode == 5, r.stderr
    assert not ran.exists(), "no worker starts on a node that failed its check"
    assert "checking disks" in r.stderr, "the check's output is shown"
    last = r.stderr.strip().splitlines()[-1]
    assert "failed its health check" in last and "exit code 4" in last, last
    assert last.endswith("/scratch is read-only; fix the node (or the check) and start the job again"), last


def test_a_check_that_hangs_is_killed_at_its_timeout(jobs):
    r = jobs.run(["--health-check", "echo started; exec sleep 600", "--health-check-timeout", 1,
                  "--", "true"], timeout=60)
    assert r.returncode == 5, r.stderr
    assert "timed out after 1 s: started" in r.stderr, r.stderr
    # The jobs fixture finds no process left with the test's marker: the sleep is gone.


def test_a_check_that_leaves_a_process_behind_has_ended_when_its_shell_has(jobs):
    # The sleep holds the check's output open; the check still passes at once
    # (not at its timeout), and the sleep is killed with it (the jobs fixture
    # finds no process of the test left).
    r = jobs.run(["--health-check", "echo checked; sleep 600 &", "--health-check-timeout", 300,
                  "--", "echo", "worker ran"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert "worker ran" in r.stdout


def test_a_passing_check_runs_the_job_and_is_in_the_summary(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 2, "--summary-json", tmp_path / "s.json",
                  "--health-check", 'echo "gpus ok on $(hostname)"; test -n "$DDPLAUNCH_TEST_MARKER"',
                  "--", "echo", "worker ran"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("worker ran") == 2
    h = json.loads((tmp_path / "s.json").read_text())["health_check"]
    assert h["ok"] and h["status"] == "passed" and h["output"][0].startswith("gpus ok on"), h


def test_a_fixed_size_job_ends_at_once_on_every_node_naming_the_sick_one(jobs, tmp_path):
    port = free_port()
    common = ["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port, "--rdzv-timeout", 600]
    healthy = jobs.start([*common, "--node-rank", 0, "--health-check", "true", "--", "true"])
    sick = jobs.start([*common, "--node-rank", 1, "--summary-json", tmp_path / "s1.json",
                       "--health-check", "echo 'nvme0: I/O error'; exit 1", "--", "true"])
    # Not the 600 s rendezvous timeout: node 0 learns it from node 1's join.
    _, err0 = healthy.communicate(timeout=120)
    _, err1 = sick.communicate(timeout=120)
    assert sick.returncode == 5, err1
    assert healthy.returncode == 3, err0
    assert "node 1" in err0 and "failed its health check" in err0 and "nvme0: I/O error" in err0, err0
    h = json.loads((tmp_path / "s1.json").read_text())["health_check"]
    assert not h["ok"] and h["output"] == ["nvme0: I/O error"], h


def test_a_sick_store_host_ends_even_an_elastic_job_at_once(jobs, tmp_path):
    # The first node to start hosts the store: without it there is no job,
    # so it does not wait out --rdzv-timeout for the others.
    r = jobs.run(["--nnodes", "1:2", "--master-port", free_port(), "--rdzv-timeout", 600,
                  "--summary-json", tmp_path / "s.json",
                  "--health-check", "echo 'ECC errors: 12'; false", "--", "true"], timeout=120)
    assert r.returncode == 5, r.stderr
    assert "failed its health check" in r.stderr and "ECC errors: 12" in r.stderr, r.stderr
    assert json.loads((tmp_path / "s.json").read_text())["exit_code"] == 5


def test_an_elastic_job_goes_on_without_the_sick_node(jobs):
    port = free_port()
    common = ["--nnodes", "1:2", "--nproc-per-node", 2, "--master-port", port, "--rdzv-timeout", 600,
              "--rdzv-last-call", 5]
    healthy = jobs.start([*common, "--health-check", "true", "--", "sh", "-c", 'echo "ws=$WORLD_SIZE"'])
    read_until(healthy.stderr, "the job starts in")  # it hosts the store
    sick = jobs.start([*common, "--health-check", "echo 'GPU 3 fell off the bus'; exit 1",
                       "--", "true"])
    _, err1 = sick.communicate(timeout=120)
    assert sick.returncode == 5, err1
    assert "failed its health check" in err1 and "GPU 3 fell off the bus" in err1, err1
    out0, err0 = healthy.communicate(timeout=120)
    assert healthy.returncode == 0, err0
    assert out0.count("ws=2") == 2, out0


def _holder_of_a_port():
    """A process (not the test's own) listening on a fresh port: a stray from an earlier job."""
    p = subprocess.Popen([sys.executable, "-c",
                          "import socket, sys, time\n"
                          "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                          "print(s.getsockname()[1], flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def test_check_runs_every_builtin_check_and_says_what_each_found(jobs):
    r = jobs.run(["check"])
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert [l.split(":")[0] for l in lines] == ["disk", "gpu", "strays"], lines
    assert lines[0].startswith("disk: ok: ") and "writable" in lines[0]
    # Without NVML (this VM) the GPU check says it was skipped and why, and fails nothing.
    assert lines[1].startswith(("gpu: ok: ", "gpu: skipped: ")), lines


def test_check_names_the_process_that_holds_the_jobs_port(jobs):
    holder, port = _holder_of_a_port()
    try:
        r = jobs.run(["check", "strays", "--port", port])
        assert r.returncode == 5, r.stdout
        assert r.stdout.strip() == f"strays: FAILED: pid {holder.pid} (python3) listens on port {port}"
        # As the job's health check: the node does not join, naming the holder.
        r = jobs.run(["--health-check", "builtin", "--worker-port", port, "--", "true"])
        assert r.returncode == 5, r.stderr
        assert f"pid {holder.pid} (python3) listens on port {port}" in r.stderr.splitlines()[-1]
    finally:
        holder.stdin.close()
        holder.wait()


def test_check_fails_a_directory_it_cannot_write_and_rejects_bad_arguments(jobs):
    r = jobs.run(["check", "disk", "--dir", "/proc/ddplaunch-logs"])
    assert r.returncode == 5, r.stdout
    assert r.stdout.startswith("disk: FAILED: cannot write in /proc (for /proc/ddplaunch-logs): "), r.stdout
    r = jobs.run(["check", "network"])
    assert r.returncode == 2 and "unknown argument 'network'" in r.stderr, r.stderr
    r = jobs.run(["check", "--port", "99999"])
    assert r.returncode == 2 and "not a port" in r.stderr, r.stderr


def test_the_check_runs_again_before_each_restart(jobs, tmp_path):
    # Round 0's rank breaks the node (the flag) and fails: the check before
    # round 1 fails, and no round 1 starts.
    flag = tmp_path / "broken"
    r = jobs.run(["--max-restarts", 3, "--health-check", f"test ! -e {flag} || (echo 'disk gone'; false)",
                  "--health-check-timeout", 30, "--", "sh", "-c",
                  f'echo "round $TORCHELASTIC_RESTART_COUNT"; touch {flag}; exit 3'])
    assert r.returncode == 5, r.stderr
    assert "round 0" in r.stdout and "round 1" not in r.stdout, r.stdout
    assert "failed its health check before round 1" in r.stderr and "disk gone" in r.stderr, r.stderr


def test_a_node_that_fails_the_check_before_a_restart_ends_a_fixed_size_job_everywhere(jobs, tmp_path):
    port = free_port()
    flag = tmp_path / "broken"
    common = ["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port, "--rdzv-timeout", 60,
              "--max-restarts", 2, "--"]
    worker = ["sh", "-c", f'[ "$RANK" = 1 ] && touch {flag} && exit 3; sleep 300']
    procs = [jobs.start(["--node-rank", 0, "--health-check", "true", *common, *worker]),
             jobs.start(["--node-rank", 1, "--health-check", f"test ! -e {flag} || (echo 'ECC'; false)",
                         *common, *worker])]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 5, err
        assert "node 1" in err and "failed its health check before round 1" in err and "ECC" in err, err
