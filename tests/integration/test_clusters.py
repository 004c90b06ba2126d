"""ddplaunch started by a scheduler, once per node: a real Open MPI mpirun, and
an srun step as recorded (what srun sets for each task). Either way the agents
form one job with nothing typed, and workers do not inherit the launcher's own
scheduler identity."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import BIN, SOURCE_DIR, TORCH_PYTHON, env_lines, free_port, needs_torch, worker

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun is not installed")


def mpirun(jobs, nodes, args, timeout=180, mpirun_args=()):
    cmd = [MPIRUN, "--oversubscribe", "-np", str(nodes), *mpirun_args]
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
        # OMPI_COMM_WORLD_* are ddplaunch's job's (its PMIx server's, as
        # mpirun sets them), never the outer mpirun's (a rank per node).
        mine = (e.get("OMPI_COMM_WORLD_RANK"), e.get("OMPI_COMM_WORLD_SIZE"),
                e.get("OMPI_COMM_WORLD_LOCAL_RANK"))
        assert mine == (e["RANK"], "4", e["LOCAL_RANK"]), "the outer mpirun's identity reached " \
            f"a worker: {mine}"
        # Its PMIx variables are its own agent's server's, never mpirun's.
        assert e["PMIX_NAMESPACE"].startswith("ddplaunch."), e["PMIX_NAMESPACE"]
        assert e["PMIX_RANK"] == e["RANK"]
    # Secure with nothing typed: node 0 made a job token and handed it to
    # every node through PMIx; the workers hold the credential derived from it.
    assert len({e.get("DDPLAUNCH_STORE_TOKEN") for e in envs.values()}) == 1
    assert all(e.get("DDPLAUNCH_STORE_TOKEN") for e in envs.values()), "the store has no token"
    assert "the store admits any client" not in err, err


@needs_mpirun
def test_mpirun_exchanges_node_zeros_address_through_pmix(jobs, tmp_path):
    # What each agent resolved: node 0's address from mpirun's PMIx server,
    # with nothing typed (the dry run shows the source without exchanging).
    rc, out, err = mpirun(jobs, 2, ["--dry-run", "--nproc-per-node", 2, "--", *worker()],
                          mpirun_args=["--output-filename", tmp_path])
    assert rc == 0, err
    docs = [json.loads(p.read_text()) for p in tmp_path.glob("*/rank.*/stdout")]
    assert len(docs) == 2
    for d in docs:
        assert d["sources"]["master_addr"] == "PMIx"
        assert d["sources"]["node_rank"] == "OMPI_COMM_WORLD_RANK"
    assert sorted(d["config"]["node_rank"] for d in docs) == [0, 1]


@needs_mpirun
def test_mpirun_with_azure_master_variable(jobs, tmp_path):
    port = free_port()
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 1, "--log-dir", tmp_path, "--",
                                    *worker("env")],
                          mpirun_args=["-x", f"AZ_BATCH_MASTER_NODE=127.0.0.1:{port}"])
    assert rc == 0, err
    envs = [json.loads((tmp_path / d / "stdout.log").read_text()) for d in os.listdir(tmp_path)]
    assert sorted(e["RANK"] for e in envs) == ["0", "1"]
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}


MPI_HELLO = os.environ.get("DDPLAUNCH_MPI_HELLO")


@needs_mpirun
@pytest.mark.skipif(not MPI_HELLO, reason="the MPI_Init helper was not built (libopenmpi-dev)")
def test_mpi_init_in_a_worker_joins_ddplaunchs_job_not_the_outer_mpiruns(jobs, tmp_path):
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 2, "--log-dir", tmp_path, "--", MPI_HELLO])
    assert rc == 0, err
    logs = [(tmp_path / d / "stdout.log").read_text() for d in os.listdir(tmp_path)]
    # One MPI world of ddplaunch's 4 ranks (through each agent's own PMIx
    # server), not mpirun's 2-process job and not 4 singletons.
    assert sorted(logs) == sorted(f"mpi rank {r} size 4 sum 6 from {(r + 3) % 4} RANK={r}\n"
                                  for r in range(4)), logs


@needs_mpirun
def test_mpirun_failure_ends_every_node_with_the_root_cause(jobs):
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 2, "--",
                                    *worker("@3:err=rank three broke", "@3:exit=9", "sleep=300")])
    assert rc == 9, err
    assert "job failed: rank 3 (node 1" in err
    assert "  | rank three broke" in err



@needs_mpirun
@needs_torch
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
    assert "srun -n 2 --ntasks-per-node=1" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@needs_mpirun
def test_frameworks_own_rules_agree_with_rank_under_mpirun(jobs):
    # Azure ML's DeepSpeed and Lightning set-ups read OMPI_COMM_WORLD_* (the mpi style).
    rc, out, err = mpirun(jobs, 2, ["--nproc-per-node", 2, "--env-style", "torch,mpi", "--python",
                                    TORCH_PYTHON, "--",
                                    os.path.join(SOURCE_DIR, "examples", "framework_ranks.py")])
    assert rc == 0, err + out
    docs = [json.loads(l.split(": ", 1)[1]) for l in out.splitlines() if l.startswith("[rank")]
    assert sorted(d["rank"] for d in docs) == [0, 1, 2, 3]
    assert all(d["agree"] for d in docs), docs
