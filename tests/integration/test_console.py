"""The launcher's own stdout and stderr never hold the job back: a pipe nobody
reads, an O_NONBLOCK stdout, a console slower than the workers. Output is
delayed (the workers wait on their pipes, as they would on that console), and
the job, its signals and its report go on."""
import collections
import json
import os
import signal

from conftest import free_port, read_until, wait_until, worker

LINE = "[rank 0]: " + "a" * 99


def ready(tmp_path, n):
    return lambda: len([f for f in os.listdir(tmp_path) if f.startswith("ready.")]) == n


def read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def flood_then_fail(jobs, tmp_path, stdout):
    """Rank 0 floods stdout (4 MB, queued behind a pipe nobody reads); rank 1
    then fails with 3. The write end is the job's alone once this returns."""
    p = jobs.start(["--nproc-per-node", 2, "--", *worker(
        "@0:flood=4000000", f"ready={tmp_path}", f"@1:waitfile={tmp_path / 'ready.0'}",
        "@1:exit=3", "sleep=300")], stdout=stdout)
    os.close(stdout)
    return p


def test_a_stdout_nobody_reads_holds_back_neither_the_job_nor_its_report(jobs, tmp_path):
    unread, stdout = os.pipe()
    try:
        p = flood_then_fail(jobs, tmp_path, stdout)
        _, err = p.communicate(timeout=120)
    finally:
        os.close(unread)
    assert p.returncode == 3, err
    assert "job failed: rank 1 (node 0" in err, err
    assert "stdout took nothing for 10 s" in err, err


def test_a_nonblocking_stdout_delays_output_but_loses_none(jobs, tmp_path):
    r, w = os.pipe()
    os.set_blocking(w, False)  # as a Node.js parent leaves it: every write may say EAGAIN
    p = jobs.start(["--nproc-per-node", 2, "--", *worker("lines=20000", f"ready={tmp_path}")],
                   stdout=w)
    os.close(w)
    # Both ranks have printed everything long before anyone reads the pipe.
    assert wait_until(ready(tmp_path, 2), timeout=120)
    data = read_all(r)
    os.close(r)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    counts = collections.Counter(line.split("]")[0] for line in data.decode().splitlines())
    assert counts == {"[rank 0": 20000, "[rank 1": 20000}


def test_a_slow_console_slows_the_workers_and_loses_no_line(jobs, tmp_path):
    total = 48_000_000  # six times the 8 MiB the launcher queues for a console
    r, w = os.pipe()
    pids = tmp_path / "pids"
    pids.mkdir()
    p = jobs.start(["--summary-json", tmp_path / "s.json", "--", *worker(
        f"pidfile={pids}", f"flood={total}", f"ready={tmp_path}")], stdout=w)
    os.close(w)
    assert wait_until(lambda: os.listdir(pids))
    rank0 = int(os.listdir(pids)[0])
    # Nobody reads: the launcher queues what it can, then leaves the worker
    # waiting on its pipe, as a worker writing to this console itself would.
    assert wait_until(lambda: "pipe_write" in _wchan(rank0), timeout=120)
    assert not os.path.exists(tmp_path / "ready.0")
    data = read_all(r).decode()
    os.close(r)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    lines = data.splitlines()
    assert len(lines) == total // 100 and all(l == LINE for l in lines), "every line, whole"
    if not os.environ.get("DDPLAUNCH_SANITIZE"):  # sanitizers keep freed memory
        with open(tmp_path / "s.json") as f:
            rss_kib = json.load(f)["launcher_max_rss_kib"]
        assert rss_kib < 32 * 1024, f"the launcher queued without bound: {rss_kib} KiB"


def _wchan(pid):
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return ""


def test_a_stop_signal_ends_every_node_while_one_console_is_blocked(jobs, tmp_path):
    port = free_port()
    unread, stdout = os.pipe()
    common = ["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port, "--rdzv-timeout", 300,
              "--heartbeat-interval", 0.2, "--heartbeat-timeout", 60, "--term-timeout", 300, "--"]
    steps = worker("@1:flood=4000000", f"ready={tmp_path}", "sleep=300")
    try:
        node0 = jobs.start(common[:-1] + ["--node-rank", 0, "--", *steps])
        node1 = jobs.start(common[:-1] + ["--node-rank", 1, "--", *steps], stdout=stdout)
        os.close(stdout)
        assert wait_until(ready(tmp_path, 2), timeout=120)
        node1.send_signal(signal.SIGTERM)
        _, err1 = node1.communicate(timeout=120)
        _, err0 = node0.communicate(timeout=120)
    finally:
        os.close(unread)
    assert node1.returncode == 128 + signal.SIGTERM, err1
    assert node0.returncode == 128 + signal.SIGTERM, err0
    assert "node 1" in err0 and "received SIGTERM" in err0, err0


def test_a_stop_signal_ends_a_stuck_exit_drain(jobs, tmp_path):
    """The job ended and its report is out, but the workers' output is queued
    behind a stdout nobody reads: a Ctrl-C then ends the drain at once (130)
    instead of waiting out the 10 s stall."""
    unread, stdout = os.pipe()
    try:
        p = flood_then_fail(jobs, tmp_path, stdout)
        # The report is written just before the exit drain begins.
        before = read_until(p.stderr, "job failed")
        assert any("job failed: rank 1" in line for line in before), before
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        os.close(unread)
    assert p.returncode == 130, err
    assert "stopped by a signal while the output drained" in err, err
    assert "stdout took nothing for 10 s" not in err, err
