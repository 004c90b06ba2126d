"""ddplaunch started by a scheduler, once per node: a real Open MPI mpirun, and
an srun step as recorded (what srun sets for each task). Either way the agents
form one job with nothing typed, and workers do not inherit the launcher's own
scheduler identity."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import BIN, SOURCE_DIR, TORCH_PYTHON, env_lines, worker

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun is not installed")


def mpirun(jobs, nodes, args, timeout=180):
    cmd = [MPIRUN, "--oversubscribe", "-np", str(nodes)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    p = subprocess.Popen(cmd + [BIN] + [str(a) for a in args], env=jobs.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         text=True, start_new_session=True)
    jobs.procs.append(p)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


@needs_mpirun
def test_mpirun_one_agent_per_node_forms_one_job(jobs, tmp_path):
    # mpirun's own output forwarding may split long lines of two processes, so
    # the environments are read from each rank's log file.
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 2, "--log-dir", tmp_path, "--",
                                    *worker("env")])
    assert rc == 0, err
    envs = {int(d): json.loads((tmp_path / d / "stdout.log").read_text()) for d in os.listdir(tmp_path)}
    assert sorted(envs) == [0, 1, 2, 3], out
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"4"}
    assert {int(e["NODE_RANK"]) for e in envs.values()} == {0, 1}
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 1
    for e in envs.values():
        leaked = [k for k in e if k.startswith(("OMPI_COMM_WORLD_", "PMIX_"))]
        assert not leaked, f"the outer mpirun's identity reached a worker: {leaked}"


@needs_mpirun
def test_mpirun_failure_ends_every_node_with_the_root_cause(jobs):
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 2, "--",
                                    *worker("@3:err=rank three broke", "@3:exit=9", "sleep=300")])
    assert rc == 9, err
    assert "job failed: rank 3 (node 1" in err
    assert "  | rank three broke" in err


def torch_ok():
    return os.path.exists(TORCH_PYTHON) and os.system(f"{TORCH_PYTHON} -c 'import torch' 2>/dev/null") == 0


@needs_mpirun
@pytest.mark.skipif(not torch_ok(), reason="python3-torch is not installed")
def test_mpirun_real_pytorch(jobs):
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--",
                                    example, "2"], timeout=300)
    assert rc == 0, err
    lines = [l for l in out.splitlines() if "replicas" in l]
    assert len(lines) == 4 and all("/4: all-reduce 10," in l for l in lines), out


def srun_task(node_id, nodes=2, job_id="777", tasks_per_node="1(x2)"):
    """What `srun -N2 --ntasks-per-node=1` sets for the task on node `node_id`."""
    return {"SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": "localhost,localhost",
            "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "localhost,localhost",
            "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
            "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "SLURM_TASKS_PER_NODE": tasks_per_node,
            "SLURM_NODEID": str(node_id), "SLURM_PROCID": str(node_id), "SLURM_LOCALID": "0",
            "SLURM_NTASKS": str(nodes), "SLURM_STEP_NUM_TASKS": str(nodes)}


def test_srun_step_forms_one_job_with_nothing_typed(jobs):
    procs = [jobs.start(["--nproc-per-node", 2, "--", *worker("env")], env=srun_task(n))
             for n in (1, 0)]
    envs = {}
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        envs.update(env_lines(out))
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, e in envs.items():
        assert e["WORLD_SIZE"] == "4" and int(e["NODE_RANK"]) == rank // 2
        # Code that reads SLURM_* (Lightning) sees one task per worker.
        assert e["SLURM_PROCID"] == str(rank) and e["SLURM_LOCALID"] == e["LOCAL_RANK"]
        assert e["SLURM_NTASKS"] == "4" and e["SLURM_TASKS_PER_NODE"] == "2(x2)"


def test_srun_with_two_tasks_per_node_is_refused(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker()], env=srun_task(0, tasks_per_node="2(x2)"))
    assert r.returncode == 2
    assert "srun --ntasks-per-node=1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
