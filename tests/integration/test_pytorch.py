"""Real PyTorch (Debian's python3-torch, CPU, gloo) in jobs that ddplaunch launched."""
import json
import os
import re
import subprocess

import pytest

from conftest import SOURCE_DIR, TORCH_PYTHON, free_port, needs_torch

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")


def torch_available():
    try:
        return subprocess.run([TORCH_PYTHON, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [needs_torch,
              pytest.mark.skipif(not torch_available(), reason="python3-torch with gloo is not installed")]


def test_gloo_process_group_and_ddp_on_one_node(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--", EXAMPLE, "3"], timeout=300)
    assert r.returncode == 0, r.stderr
    lines = sorted(l for l in r.stdout.splitlines() if "replicas" in l)
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        assert re.match(rf"\[rank {rank}\]: rank {rank}/2: all-reduce 3, loss \S+, replicas agree$", line), line


def test_a_crashing_pytorch_rank_ends_the_job(jobs, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(
        "import os, sys, torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method='env://')\n"
        "if dist.get_rank() == 1:\n"
        "    raise RuntimeError('rank 1 gives up')\n"
        "dist.barrier()\n")
    r = jobs.run(["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--", script], timeout=300)
    assert r.returncode == 1
    assert "job failed: rank 1" in r.stderr
    assert "  | RuntimeError: rank 1 gives up" in r.stderr


def test_mpi_style_ranks_drive_a_real_process_group(jobs):
    # The example takes its rank, world size and master from OMPI_COMM_WORLD_* and
    # AZ_BATCH_MASTER_NODE, as MPI-based set-ups do, and checks they agree with RANK.
    r = jobs.run(["--nproc-per-node", 3, "--env-style", "torch,mpi", "--python", TORCH_PYTHON, "--",
                  EXAMPLE, "2", "mpi"], timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if "replicas agree" in l]
    assert len(lines) == 3 and all("/3: all-reduce 6," in l for l in lines), r.stdout


RECORD = os.path.join(SOURCE_DIR, "tests", "helpers", "torch_record.py")


def test_record_error_file_gives_the_exception_even_when_stderr_buries_it(jobs, tmp_path):
    outer = tmp_path / "outer_error.json"  # as a scheduler (or an outer torchrun) sets it
    r = jobs.run(["--nproc-per-node", 2, "--log-dir", tmp_path / "logs", "--python", TORCH_PYTHON,
                  "--", RECORD], env={"TORCHELASTIC_ERROR_FILE": str(outer)}, timeout=300)
    assert r.returncode == 1, r.stderr
    report = r.stderr[r.stderr.index("job failed: rank 1"):]
    assert "rank 1 raised ValueError: loss is nan at step 7 on rank 1 (é)" in report, report
    assert "  |   File \"" + RECORD + "\"" in report
    assert "  | noise line 299" in report  # the stderr tail is still there, after it
    # Each rank got its own error file; rank 1's is in its log directory.
    rank1 = json.loads((tmp_path / "logs" / "1" / "error.json").read_text())
    assert rank1["message"]["message"].startswith("ValueError: loss is nan")
    # The inherited file receives the root cause's error, with its exit code.
    written = json.loads(outer.read_text())
    assert written["message"]["message"] == "ValueError: loss is nan at step 7 on rank 1 (é)"
    assert written["message"]["errorCode"] == 1
    assert "Traceback" in written["message"]["extraInfo"]["py_callstack"]


def test_a_record_traceback_also_in_the_stderr_tail_is_shown_once(jobs):
    # The rank's stderr ends with its traceback and a few lines more: the
    # report shows the traceback under "raised", then only the lines more.
    r = jobs.run(["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--", RECORD],
                 env={"NOISE_LINES": "3"}, timeout=300)
    assert r.returncode == 1, r.stderr
    report = r.stderr[r.stderr.index("job failed: rank 1"):]
    assert "rank 1 raised ValueError: loss is nan at step 7 on rank 1 (é)" in report, report
    assert report.count("  |   File \"" + RECORD + "\"") == 1, report
    assert report.count("  | ValueError: loss is nan") == 1, report
    assert "last lines of rank 1's stderr, beside that traceback:" in report, report
    assert "  | noise line 2" in report, report


def test_record_error_crosses_nodes(jobs, tmp_path):
    port = free_port()
    args = ["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port, "--python", TORCH_PYTHON,
            "--", RECORD]
    procs = [jobs.start(["--node-rank", n, *args], env={"FAIL_RANK": "3"}) for n in (1, 0)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    for rc, out, err in results:
        assert rc == 1, err
    node0_err = results[1][2]
    assert "rank 3 raised ValueError: loss is nan at step 7 on rank 3" in node0_err, node0_err
