"""The examples/ scripts for each framework, run as their users run them:
each reads its variables the framework's way and fails if they disagree
with what ddplaunch gave (docs/FRAMEWORKS.md)."""
import json
import os
import re

import pytest

from conftest import SOURCE_DIR, TORCH_PYTHON, free_port

EXAMPLES = os.path.join(SOURCE_DIR, "examples")
PY = ["--python", TORCH_PYTHON]


def outputs(stdout):
    return [re.sub(r"^\[rank \d+\]: ", "", l) for l in stdout.splitlines() if l.startswith("[rank")]


def two_nodes(jobs, args, env=None):
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--master-port", port, *args], env=env)
             for n in (1, 0)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    for rc, out, err in results:
        assert rc == 0, err
    return [line for _, out, _ in results for line in outputs(out)]


def test_lightning_accelerate_and_deepspeed_agree_with_rank(jobs):
    lines = two_nodes(jobs, ["--nproc-per-node", 2, *PY, "--", f"{EXAMPLES}/framework_ranks.py"])
    docs = [json.loads(l) for l in lines]
    assert sorted(d["rank"] for d in docs) == [0, 1, 2, 3]
    assert all(d["agree"] for d in docs), docs
    assert {d["via"]["lightning"] for d in docs} == {"torchelastic"}


def test_with_the_launchers_own_slurm_task_lightning_still_agrees(jobs):
    # Inside an srun task (recorded: one task per node), Lightning picks its
    # SLURM environment first: the rewritten SLURM_* must match RANK.
    env = {"SLURM_JOB_ID": "91", "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "train",
           "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NODELIST": "localhost",
           "SLURM_STEP_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
           "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1"}
    r = jobs.run(["--nproc-per-node", 3, *PY, "--", f"{EXAMPLES}/framework_ranks.py"], env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    docs = [json.loads(l) for l in outputs(r.stdout)]
    assert len(docs) == 3 and all(d["agree"] and d["via"]["lightning"] == "slurm" for d in docs), docs


def test_tf_multi_worker_cluster_is_one_and_the_same(jobs):
    lines = two_nodes(jobs, ["--nproc-per-node", 2, "--env-style", "tf", *PY, "--",
                             f"{EXAMPLES}/tf_config_check.py"])
    tasks = sorted(l.split(" cluster ")[0] for l in lines)
    assert tasks == [f"task worker:{i} rank {i}" for i in range(4)]
    assert len({l.split(" cluster ")[1] for l in lines}) == 1


def test_tf_parameter_server_job(jobs):
    lines = two_nodes(jobs, ["--nproc-per-node", 2, "--tf-chief", "--tf-ps", 1, *PY, "--",
                             f"{EXAMPLES}/tf_config_check.py"])
    tasks = sorted(l.split(" cluster ")[0] for l in lines)
    assert tasks == ["task chief:0 rank 0", "task ps:0 rank 1", "task worker:0 rank 2",
                     "task worker:1 rank 3"]
    assert len({l.split(" cluster ")[1] for l in lines}) == 1


@pytest.mark.parametrize("style", ["underscore", "dash"])
def test_legacy_local_rank_argument(jobs, style):
    r = jobs.run(["--nproc-per-node", 2, "--local-rank-arg", style, *PY, "--",
                  f"{EXAMPLES}/legacy_local_rank.py", "--epochs", 1])
    assert r.returncode == 0, r.stderr + r.stdout
    assert sorted(outputs(r.stdout)) == [
        "local_rank argument 0, LOCAL_RANK 0: agree", "local_rank argument 1, LOCAL_RANK 1: agree"]
