"""ddplaunch under a real Slurm: Debian's slurmctld, slurmd and munge brought
up by the test as a two-host cluster (slurm_cluster.py), torn down after.
One ddplaunch per node, started by srun or an sbatch script, forms one job
with nothing typed; scancel ends every worker on both hosts."""
import json
import os
import subprocess

import pytest

import slurm_cluster
from conftest import BIN, SOURCE_DIR, TORCH_PYTHON, alive, needs_torch, wait_until, worker

why_not = slurm_cluster.available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=str(why_not))


@pytest.fixture(scope="module")
def cluster():
    c = slurm_cluster.SlurmCluster(nodes=2)
    yield c
    c.stop()


@pytest.fixture
def shared(cluster, tmp_path):
    """A directory both hosts see (they share the file system), writable by the tasks."""
    os.chmod(tmp_path, 0o777)
    return tmp_path


def srun(cluster, jobs, args, timeout=180):
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=1", *map(str, args)], timeout=timeout,
                    env=jobs.env())
    return r


def logged_envs(log_dir):
    """{rank: environment} from each rank's log file (srun splits long lines)."""
    return {int(d): json.loads((log_dir / d / "stdout.log").read_text())
            for d in os.listdir(log_dir)}


def await_logged_envs(log_dir, ranks):
    """logged_envs() of a running job, once each of `ranks` ranks' line is in
    its log: a worker's output reaches its file a moment after it was
    written, so a rank may be ready before its line is logged."""
    def complete():
        try:
            envs = logged_envs(log_dir)
        except (OSError, ValueError):
            return None
        return envs if len(envs) == ranks else None
    envs = wait_until(complete, timeout=60)
    assert envs, f"the ranks' lines did not all reach {log_dir}"
    return envs


def test_srun_step_forms_one_job_across_two_hosts(cluster, jobs, shared):
    r = srun(cluster, jobs, [BIN, "--nproc-per-node", 2, "--log-dir", shared / "logs", "--",
                             *worker("env")])
    assert r.returncode == 0, r.stderr + cluster.logs()
    envs = logged_envs(shared / "logs")
    assert sorted(envs) == [0, 1, 2, 3], r.stdout
    for rank, e in envs.items():
        assert e["WORLD_SIZE"] == "4" and e["NODE_RANK"] == str(rank // 2)
        assert e["SLURMD_NODENAME"] == f"node{rank // 2}"
        assert e["MASTER_ADDR"] == "node0"
        assert e["TORCHELASTIC_RUN_ID"] == f"slurm-{e['SLURM_JOB_ID']}.{e['SLURM_STEP_ID']}"
        # Code that reads SLURM_* (Lightning) sees one task per worker.
        assert e["SLURM_PROCID"] == str(rank) and e["SLURM_LOCALID"] == e["LOCAL_RANK"]
        assert e["SLURM_NTASKS"] == "4"
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 1


def test_srun_mpi_pmix_secures_the_job_with_nothing_typed(cluster, jobs, shared):
    """Under srun --mpi=pmix, node 0 makes a job token and hands it to every
    node through Slurm's PMIx server: the store admits only this job."""
    r = cluster.run(["srun", "--mpi=pmix", "-N2", "--ntasks-per-node=1", BIN, "--nproc-per-node", "1",
                     "--log-dir", str(shared / "logs"), "--", *worker("env")],
                    timeout=180, env=jobs.env())
    if r.returncode != 0 and "mpi/pmix" in r.stderr and "ddplaunch" not in r.stderr:
        pytest.skip(f"this Slurm cannot run --mpi=pmix: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr + cluster.logs()
    envs = logged_envs(shared / "logs")
    assert sorted(envs) == [0, 1], r.stdout
    tokens = {e.get("DDPLAUNCH_STORE_TOKEN") for e in envs.values()}
    assert len(tokens) == 1 and None not in tokens, "the store has no token"
    assert "the store admits any client" not in r.stderr, r.stderr


def test_sbatch_script_with_srun(cluster, jobs, shared):
    script = shared / "job.sh"
    script.write_text(f"""#!/bin/sh
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH -o {shared}/out.txt
#SBATCH -e {shared}/err.txt
srun {BIN} --nproc-per-node 2 --log-dir {shared}/logs -- {worker('env')[0]} env
""")
    r = cluster.run(["sbatch", "--wait", str(script)], timeout=180, env=jobs.env())
    assert r.returncode == 0, r.stderr + (shared / "err.txt").read_text() + cluster.logs()
    envs = logged_envs(shared / "logs")
    assert sorted(envs) == [0, 1, 2, 3]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"4"}
    assert {e["SLURMD_NODENAME"] for e in envs.values()} == {"node0", "node1"}


def test_sbatch_script_without_srun_runs_on_every_node_and_scancel_ends_it(cluster, jobs,
                                                                          shared):
    """`ddplaunch` alone in an sbatch script starts the job on both nodes of
    the allocation through srun, as mpirun would, and says so in one line;
    scancel then ends every worker on both hosts."""
    script = shared / "job.sh"
    script.write_text(f"""#!/bin/sh
#SBATCH -N 2
#SBATCH -o {shared}/out.txt
#SBATCH -e {shared}/err.txt
{BIN} --nproc-per-node 2 --log-dir {shared}/logs -- {worker()[0]} env ready={shared} \\
    pidfile={shared} waitfile={shared}/go
""")
    job_id = cluster.run(["sbatch", "--parsable", str(script)], env=jobs.env()).stdout.strip()
    assert job_id, cluster.logs()
    try:
        assert wait_until(lambda: len(list(shared.glob("ready.*"))) == 4, timeout=120), \
            (shared / "err.txt").read_text() + cluster.logs()
        envs = await_logged_envs(shared / "logs", 4)
        assert {e["WORLD_SIZE"] for e in envs.values()} == {"4"}
        assert {e["SLURMD_NODENAME"] for e in envs.values()} == {"node0", "node1"}
        assert "DDPLAUNCH_RDZV_TOKEN" not in next(iter(envs.values()))
        err = (shared / "err.txt").read_text()
        assert "starting the job on 2 of its nodes with srun" in err, err
        assert cluster.run(["scancel", job_id]).returncode == 0
        pids = [int(f.name) for f in shared.iterdir() if f.name.isdigit()]
        assert len(pids) == 4

        def all_gone():
            return not [pid for pid in pids if alive(pid)]
        assert wait_until(all_gone, timeout=60), "workers left running after scancel"
    finally:
        cluster.run(["scancel", job_id])


def test_sbatch_script_with_nnodes_1_stays_on_the_batch_host(cluster, jobs, shared):
    script = shared / "job.sh"
    script.write_text(f"""#!/bin/sh
#SBATCH -N 2
#SBATCH -o {shared}/out.txt
#SBATCH -e {shared}/err.txt
{BIN} --nnodes 1 --nproc-per-node 2 --log-dir {shared}/logs -- {worker('env')[0]} env
""")
    r = cluster.run(["sbatch", "--wait", str(script)], timeout=180, env=jobs.env())
    assert r.returncode == 0, r.stderr + (shared / "err.txt").read_text() + cluster.logs()
    envs = logged_envs(shared / "logs")
    assert sorted(envs) == [0, 1]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"2"}
    assert len({e["SLURMD_NODENAME"] for e in envs.values()}) == 1
    assert "--nnodes 1 keeps the job on this node" in (shared / "err.txt").read_text()


def test_two_tasks_per_node_is_refused_with_how_to_call_srun(cluster, jobs):
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=2", BIN, "--nproc-per-node", "2", "--",
                     *worker()], env=jobs.env())
    assert r.returncode == 2, r.stderr
    errors = [l for l in r.stderr.splitlines() if "ddplaunch: error:" in l]
    assert len(errors) == 4 and all("srun -n 2 --ntasks-per-node=1" in l for l in errors), r.stderr


def test_the_advice_for_two_tasks_per_node_works_inside_that_allocation(cluster, jobs, shared):
    """In an sbatch allocation made with --ntasks-per-node=2, plain `srun
    ddplaunch` is refused, and the command the refusal gives runs the job on
    both hosts (srun alone would ignore --ntasks-per-node=1 there)."""
    script = shared / "job.sh"
    script.write_text(f"""#!/bin/sh
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH -o {shared}/out.txt
#SBATCH -e {shared}/err.txt
srun {BIN} --nproc-per-node 2 -- true
echo "refused=$?"
advice=$(sed -n 's/.*run one task per node: \\(srun -n [0-9]* --ntasks-per-node=1\\) .*/\\1/p' {shared}/err.txt | head -1)
echo "advice=$advice"
$advice {BIN} --nproc-per-node 2 --log-dir {shared}/logs -- {worker('env')[0]} env
echo "advised=$?"
""")
    r = cluster.run(["sbatch", "--wait", str(script)], timeout=180, env=jobs.env())
    out = (shared / "out.txt").read_text()
    assert "refused=2" in out and "advice=srun -n 2 --ntasks-per-node=1" in out, \
        out + (shared / "err.txt").read_text()
    assert "advised=0" in out, out + (shared / "err.txt").read_text() + cluster.logs()
    envs = logged_envs(shared / "logs")
    assert sorted(envs) == [0, 1, 2, 3]
    assert {e["SLURMD_NODENAME"] for e in envs.values()} == {"node0", "node1"}


def running_step(cluster, jobs, shared, options="", steps="", program=None):
    """An srun step of one ddplaunch per host (2 ranks each), each writing its
    summary, every rank ready and sleeping: (srun's Popen, the job id).
    `program` replaces the helper worker; it creates {shared}/ready.$RANK."""
    program = program or f"{worker()[0]} {steps} ready={shared} pidfile={shared} sleep=300"
    cmd = ["srun", "-N2", "--ntasks-per-node=1", "sh", "-c",
           f'exec {BIN} --nproc-per-node 2 {options} --summary-json {shared}/summary.$SLURM_NODEID.json '
           f'-- {program}']
    p = cluster.popen(cmd, env=jobs.env())
    jobs.procs.append(p)
    def ready_or_ended():
        return len(list(shared.glob("ready.*"))) == 4 or p.poll() is not None
    wait_until(ready_or_ended, timeout=120)
    if len(list(shared.glob("ready.*"))) != 4:
        ready = sorted(f.name for f in shared.glob("ready.*"))
        queue = cluster.run(["squeue", "-h", "-o", "%i %T %N"]).stdout
        processes = cluster.processes()
        p.terminate()
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        pytest.fail(f"ready: {ready}\nsqueue: {queue}\n{processes}\n--- srun stdout\n"
                    f"{out[-3000:]}\n--- srun stderr\n{err[-3000:]}\n{cluster.logs()}")
    return p, cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split()[0]


def test_scancel_ends_every_worker_on_both_hosts(cluster, jobs, shared):
    p, job_id = running_step(cluster, jobs, shared)
    r = cluster.run(["scancel", job_id])
    assert r.returncode == 0, r.stderr
    p.communicate(timeout=120)
    for n in (0, 1):
        summary = json.loads((shared / f"summary.{n}.json").read_text())
        assert summary["exit_code"] == 143, summary
    pids = [int(f.name) for f in shared.iterdir() if f.name.isdigit()]
    assert len(pids) == 4
    running = [pid for pid in pids if alive(pid)]
    assert not running, f"workers left running after scancel: {running}"



@needs_torch
def test_real_pytorch_under_srun_across_two_hosts(cluster, jobs):
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    r = srun(cluster, jobs, [BIN, "--nproc-per-node", 2, "--python", TORCH_PYTHON, "--",
                             example, 2], timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if "replicas" in l]
    assert len(lines) == 4 and all("/4: all-reduce 10," in l for l in lines), r.stdout


def test_frameworks_own_rules_agree_with_rank_under_srun(cluster, jobs):
    # Lightning takes SLURM_* before torchrun's variables; accelerate and
    # DeepSpeed take RANK. All must see the same ranks.
    r = srun(cluster, jobs, [BIN, "--nproc-per-node", 2, "--python", TORCH_PYTHON, "--",
                             os.path.join(SOURCE_DIR, "examples", "framework_ranks.py")])
    assert r.returncode == 0, r.stderr + r.stdout
    docs = [json.loads(l.split(": ", 1)[1]) for l in r.stdout.splitlines() if l.startswith("[rank")]
    assert sorted(d["rank"] for d in docs) == [0, 1, 2, 3]
    assert all(d["agree"] and d["via"]["lightning"] == "slurm" for d in docs), docs


MPI_HELLO = os.environ.get("DDPLAUNCH_MPI_HELLO")


@pytest.mark.skipif(not MPI_HELLO, reason="the MPI helper was not built (libopenmpi-dev)")
@pytest.mark.parametrize("mpi", [[], ["--mpi=pmix"]], ids=["srun", "srun-mpi-pmix"])
def test_an_mpi_program_under_srun_sees_ddplaunchs_job_not_the_steps(cluster, jobs, mpi):
    """Under srun (with or without its own PMIx), the workers inherit
    SLURM_STEP_ID: Open MPI would take them for srun's tasks (and abort, "direct
    launched"); with ddplaunch's PMIx server they form ddplaunch's world."""
    r = cluster.run(["srun", *mpi, "-N2", "--ntasks-per-node=1", BIN, "--nproc-per-node", "2",
                     "--", MPI_HELLO], timeout=180, env=jobs.env())
    assert r.returncode == 0, r.stderr
    lines = sorted(l.split("]: ", 1)[-1] for l in r.stdout.splitlines() if "mpi rank" in l)
    assert lines == [f"mpi rank {i} size 4 sum 6 from {(i + 3) % 4} RANK={i}"
                     for i in range(4)], r.stdout + r.stderr


def test_scancel_signal_usr1_preempts_every_rank_on_both_hosts(cluster, jobs, shared):
    """`scancel --signal=USR1` (what a preemption or `--signal=USR1@T` sends)
    with --preempt-signal USR1: every rank on both hosts checkpoints and
    exits 0, and both launchers exit 75 so that a wrapper can requeue."""
    p, job_id = running_step(cluster, jobs, shared, "--preempt-signal USR1", "checkpoint=USR1")
    r = cluster.run(["scancel", "--signal=USR1", job_id])
    assert r.returncode == 0, r.stderr
    out, err = p.communicate(timeout=120)
    # srun's own code is its tasks' (a requeueing wrapper reads it).
    assert p.returncode == 75, err
    assert out.count("checkpointed on SIGUSR1") == 4, out
    for n in (0, 1):
        summary = json.loads((shared / f"summary.{n}.json").read_text())
        assert summary["exit_code"] == 75 and summary["stop_reason"] == "preempted", summary


def test_a_preemption_signal_reaches_each_rank_once(cluster, jobs, shared):
    """Slurm signals every process of the step, the ranks too: ddplaunch does
    not send the preemption signal again (a checkpoint handler run twice,
    nested, corrupts the checkpoint), on the node that received it nor on
    the other. Each rank counts what it receives for a second after the
    first, then exits 0."""
    script = shared / "usr1.sh"
    script.write_text(
        'n=0\n'
        'trap \'n=$((n + 1)); echo "rank $RANK got USR1 ($n)"\' USR1\n'
        f'touch {shared}/ready.$RANK\n'
        'while [ "$n" = 0 ]; do sleep 0.1; done\n'
        'sleep 1\n')
    p, job_id = running_step(cluster, jobs, shared, "--preempt-signal USR1", program=f"sh {script}")
    r = cluster.run(["scancel", "--signal=USR1", job_id])
    assert r.returncode == 0, r.stderr
    out, err = p.communicate(timeout=120)
    assert p.returncode == 75, err
    got = sorted(l.split("]: ", 1)[-1] for l in out.splitlines() if "got USR1" in l)
    assert got == [f"rank {r} got USR1 (1)" for r in range(4)], out + err
    assert "from Slurm" in err, err
