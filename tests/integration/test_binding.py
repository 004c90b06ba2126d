"""Each local rank's CPUs and GPUs: --cpu-bind, --gpus-per-proc,
--report-bindings, as a worker sees them (its real affinity, its
CUDA_VISIBLE_DEVICES) and as the launcher reports them."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import BIN, env_lines, worker

AFFINITY = ["sh", "-c", "grep Cpus_allowed_list /proc/self/status | cut -f2; echo omp=$OMP_NUM_THREADS"]


def affinities(stdout):
    """{rank: (cpus, omp)} from the AFFINITY worker's lines."""
    cpus, omp = {}, {}
    for line in stdout.splitlines():
        m = re.match(r"^\[rank (\d+)\]: (.*)$", line)
        if m and m.group(2).startswith("omp="):
            omp[int(m.group(1))] = m.group(2)[4:]
        elif m:
            cpus[int(m.group(1))] = m.group(2)
    return {r: (cpus[r], omp.get(r)) for r in cpus}


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(allowed_cpus()) < 2, reason="needs two CPUs")
def test_cores_gives_each_rank_its_own_share(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--cpu-bind", "cores", "--", *AFFINITY])
    assert r.returncode == 0, r.stderr
    got = affinities(r.stdout)
    shares = [set(_expand(got[rank][0])) for rank in (0, 1)]
    assert shares[0] and shares[1] and not shares[0] & shares[1], got
    assert shares[0] | shares[1] == set(allowed_cpus())
    assert got[0][1] == str(len(shares[0])), "OMP_NUM_THREADS is the share"


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_the_launchers_own_affinity_is_what_gets_split(jobs):
    cpu = allowed_cpus()[-1]
    p = subprocess.run(["taskset", "-c", str(cpu), BIN, "--nproc-per-node", "3", "--cpu-bind",
                        "cores", "--", *AFFINITY], env=jobs.env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert {c for c, _ in affinities(p.stdout).values()} == {str(cpu)}
    assert "3 workers share 1 allowed CPUs" in p.stderr


def test_user_omp_num_threads_wins_over_the_share(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--cpu-bind", "cores", "--", *AFFINITY],
                 env={"OMP_NUM_THREADS": "5"})
    assert r.returncode == 0, r.stderr
    assert {omp for _, omp in affinities(r.stdout).values()} == {"5"}


def test_gpus_per_proc_slices_the_visible_list(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--gpus-per-proc", 2, "--report-bindings", "--",
                  *worker("env")], env={"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb,GPU-cc,GPU-dd"})
    assert r.returncode == 0, r.stderr
    envs = env_lines(r.stdout)
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "GPU-aa,GPU-bb"
    assert envs[1]["CUDA_VISIBLE_DEVICES"] == "GPU-cc,GPU-dd"
    assert "rank 1 (node 0, local rank 1): CPUs inherited, GPUs GPU-cc,GPU-dd" in r.stderr


def test_slurms_grant_is_the_list_when_cuda_visible_devices_is_unset(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--gpus-per-proc", 1, "--", *worker("env")],
                 env={"SLURM_STEP_GPUS": "4,6"})
    assert r.returncode == 0, r.stderr
    assert [env_lines(r.stdout)[i]["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["4", "6"]


def test_too_few_gpus_is_a_usage_error_naming_the_numbers(jobs):
    r = jobs.run(["--nproc-per-node", 3, "--gpus-per-proc", 1, "--", *worker()],
                 env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "ddplaunch: error: --gpus-per-proc 1 for 3 workers needs 3 GPUs; this node may use 2 "
        "(from CUDA_VISIBLE_DEVICES: 0,1); lower --gpus-per-proc or --nproc-per-node"]


def _expand(cpu_list):
    out = []
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out

