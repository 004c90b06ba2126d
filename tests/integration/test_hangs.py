"""--hang-timeout: a rank that shows no progress (no output line, no write to
DDPLAUNCH_PROGRESS_FD) for that long is hung. Its stacks are shown (Python's
faulthandler, through SIGABRT) in its stderr and the report, and the job
ends as for any failing rank (or restarts, with restarts left)."""
import json
import shutil
import textwrap
import threading
import time

import pytest

from conftest import TORCH_PYTHON, finish, free_port, needs_torch

SCRIPT = textwrap.dedent("""\
    import os, sys, time
    def stuck_forever():
        time.sleep(300)
    rank = int(os.environ["RANK"])
    round = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print(f"rank {rank} starts", flush=True)
    if rank == 1 and round == 0:
        stuck_forever()
    # Quiet, but alive: one byte on the progress fd every 0.1 s, for 5 s.
    fd = int(os.environ["DDPLAUNCH_PROGRESS_FD"])
    for _ in range(50):
        os.write(fd, b".")
        time.sleep(0.1)
    """)


# A job stuck in a collective: the last rank stops in its own code (the
# culprit), and every other rank then waits for it in all_reduce.
# Until its first step a rank shows progress on DDPLAUNCH_PROGRESS_FD
# (importing torch takes seconds on a loaded machine, holding the GIL while
# it loads torch._C: the beat comes from a process of its own).
COLLECTIVE = textwrap.dedent("""\
    import os, subprocess, time
    fd = int(os.environ["DDPLAUNCH_PROGRESS_FD"])
    beat = subprocess.Popen(["sh", "-c", f"while :; do printf . >&{fd}; sleep 0.2; done"],
                            pass_fds=(fd,))
    import torch, torch.distributed as dist
    def fetch_next_batch():
        time.sleep(1000)
    def step(t):
        dist.all_reduce(t)
    def main():
        dist.init_process_group("gloo")
        t = torch.ones(1)
        step(t)
        beat.kill()
        beat.wait()
        print(f"rank {dist.get_rank()} stepped", flush=True)
        if dist.get_rank() == dist.get_world_size() - 1:
            fetch_next_batch()
        step(t)
    main()
    """)


def hung_stacks(report):
    """The report's stack lines, in its order."""
    lines = report.splitlines()
    at = next(i for i, line in enumerate(lines) if "the stacks of the ranks without progress" in line)
    return [line.strip() for line in lines[at + 1:] if line.startswith("  rank")]


@needs_torch
def test_a_hang_shows_every_ranks_stack_and_blames_the_one_outside_the_collective(jobs, tmp_path):
    (tmp_path / "hung.py").write_text(COLLECTIVE)
    r = jobs.run(["--nproc-per-node", 2, "--hang-timeout", 3, "--summary-json", tmp_path / "s.json",
                  "--", TORCH_PYTHON, tmp_path / "hung.py"], timeout=120)
    assert r.returncode == 134, r.stderr
    assert "job failed: rank 1 (node 0" in r.stderr, r.stderr
    stacks = hung_stacks(r.stderr)
    assert stacks[0] == "rank 1: fetch_next_batch ← main ← <module>", r.stderr
    assert stacks[1].startswith("rank 0: all_reduce") and "step ← main ← <module>" in stacks[1], r.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["root_cause"]["rank"] == 1
    by_rank = {o["rank"]: o for o in s["ranks"]}
    assert by_rank[0]["hung_for_s"] > 0 and by_rank[0]["stack"].startswith("all_reduce"), by_rank
    assert by_rank[1]["hung_for_s"] > 0 and by_rank[1]["stack"].startswith("fetch_next_batch"), by_rank


@needs_torch
def test_a_hung_job_across_nodes_takes_every_nodes_stacks(jobs, tmp_path):
    """Two nodes, ranks 0-3: rank 3 (node 1) stops in its own code. Whichever
    node finds the hang first, every node's ranks give their stacks, every
    node's report blames rank 3, and node 0's (which has every rank) lists
    ranks 0-2 together."""
    (tmp_path / "hung.py").write_text(COLLECTIVE)
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port,
                         "--hang-timeout", 3, "--", TORCH_PYTHON, tmp_path / "hung.py"])
             for _ in range(2)]
    done = finish(procs, timeout=120)
    for rc, _, err in done:
        assert rc == 134, err
        assert "job failed: rank 3 (node 1" in err, err
        assert hung_stacks(err)[0] == "rank 3: fetch_next_batch ← main ← <module>", err
    # Node ranks are automatic: node 0 is whichever report lists rank 0.
    node0 = next(err for _, _, err in done if "rank 0 (node 0," in err)
    assert hung_stacks(node0)[1].startswith("ranks 0-2: all_reduce ← step ← main"), node0


def test_a_hung_python_rank_shows_its_stack_and_ends_the_job(jobs, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    r = jobs.run(["--nproc-per-node", 2, "--hang-timeout", 2, "--summary-json", tmp_path / "s.json",
                  "--log-dir", tmp_path / "logs", "--", TORCH_PYTHON, tmp_path / "train.py"], timeout=120)
    assert r.returncode == 134, r.stderr  # SIGABRT
    assert "rank 1 on node 0 (" in r.stderr and "shows no progress" in r.stderr and "the job is hung" in r.stderr, r.stderr
    assert "job failed: rank 1 (node 0" in r.stderr and "hung: no progress for" in r.stderr, r.stderr
    # The stack, in the report and in the rank's log.
    assert 'in stuck_forever' in r.stderr, r.stderr
    assert 'in stuck_forever' in (tmp_path / "logs" / "1" / "stderr.log").read_text()
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["root_cause"]["rank"] == 1 and s["root_cause"]["hung_for_s"] >= 2
    # Rank 0 was quiet for as long, but wrote to its progress fd: not hung.
    rank0 = next(o for o in s["ranks"] if o["rank"] == 0)
    assert "hung_for_s" not in rank0 and rank0["stopped_by_launcher"]


def test_a_hung_rank_with_restarts_left_restarts_the_job(jobs, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    r = jobs.run(["--nproc-per-node", 2, "--hang-timeout", 2, "--max-restarts", 1, "--",
                  TORCH_PYTHON, tmp_path / "train.py"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hung: no progress for" in r.stderr and "restart 1 of 1" in r.stderr, r.stderr


def test_output_lines_are_progress_and_a_native_program_is_stopped_too(jobs):
    # Rank 0 prints a line every 0.2 s for 5 s; rank 1 is silent in sleep.
    program = ["sh", "-c", 'if [ "$RANK" = 0 ]; then for i in $(seq 25); do echo $i; sleep 0.2; done; '
                           'else sleep 300; fi']
    r = jobs.run(["--nproc-per-node", 2, "--hang-timeout", 2, "--", *program], timeout=120)
    assert r.returncode == 134, r.stderr
    assert "job failed: rank 1 (node 0" in r.stderr and "hung" in r.stderr, r.stderr


@pytest.mark.skipif(not (shutil.which("eu-stack") or shutil.which("gdb")),
                    reason="needs eu-stack (elfutils) or gdb; quickstart installs elfutils")
def test_a_hung_native_ranks_stacks_are_printed_by_a_debugger(jobs, tmp_path):
    # exec: the worker itself sleeps, in clock_nanosleep, a native program.
    program = ["sh", "-c", "exec sleep 300"]
    r = jobs.run(["--hang-timeout", 1, "--log-dir", tmp_path / "logs", "--summary-json",
                  tmp_path / "s.json", "--", *program], timeout=120)
    assert r.returncode == 134, r.stderr
    assert "a debugger prints native stacks, then SIGABRT" in r.stderr, r.stderr
    log = (tmp_path / "logs" / "0" / "stderr.log").read_text()
    assert "nanosleep" in log, log
    tail = json.loads((tmp_path / "s.json").read_text())["root_cause"]["last_stderr"]
    assert any("nanosleep" in line for line in tail), tail


def test_a_hung_native_rank_without_a_debugger_says_how_to_get_its_stacks(jobs, tmp_path):
    """No eu-stack, gdb or cuda-gdb on the launcher's PATH (a GPU image
    often has none): the hang line says so and what to install, and the
    rank still gets SIGABRT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "sleep"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    r = jobs.run(["--hang-timeout", 1, "--", "sh", "-c", "exec sleep 300"],
                 env={"PATH": str(bin_dir)}, timeout=120)
    assert r.returncode == 134, r.stderr
    assert "with SIGABRT (no eu-stack, gdb or cuda-gdb on PATH to print native stacks: install " \
           "elfutils)" in r.stderr, r.stderr


def test_the_progress_fd_is_a_pipe_and_only_with_a_hang_timeout(jobs):
    show = 'echo "fd=${DDPLAUNCH_PROGRESS_FD:-none}"; ls -l /proc/$$/fd/'
    r = jobs.run(["--hang-timeout", 60, "--", "sh", "-c", show])
    assert r.returncode == 0, r.stderr
    assert "fd=3" in r.stdout and " 3 -> pipe:" in r.stdout and " 4 -> " not in r.stdout, r.stdout
    r = jobs.run(["--", "sh", "-c", show])
    assert "fd=none" in r.stdout and " 3 -> " not in r.stdout, r.stdout


def test_a_rank_held_back_by_a_slow_console_is_not_hung(jobs):
    """Backpressure stops the launcher reading a flooding rank while nobody
    reads its stdout (a pager, Ctrl-S, a slow log shipper): that rank cannot
    show progress, so its hang clock stands still. Held three times
    --hang-timeout, the job still ends 0 once the console reads again."""
    p = jobs.start(["--nproc-per-node", 2, "--hang-timeout", 1, "--",
                    "sh", "-c", "yes line | head -c 30000000"])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # the stall itself is the condition under test
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.1)
    reader = threading.Thread(target=lambda: p.stdout.read())
    reader.start()
    p.wait(timeout=120)
    reader.join()
    err = p.stderr.read()
    assert p.returncode == 0, err
    assert "hung" not in err, err
