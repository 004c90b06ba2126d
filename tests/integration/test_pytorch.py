"""Real PyTorch (Debian's python3-torch, CPU, gloo) in jobs that ddplaunch launched."""
import os
import re
import subprocess

import pytest

from conftest import SOURCE_DIR, TORCH_PYTHON

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")


def torch_available():
    try:
        return subprocess.run([TORCH_PYTHON, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = pytest.mark.skipif(not torch_available(), reason="python3-torch with gloo is not installed")


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
