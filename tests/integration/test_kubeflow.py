"""Kubeflow Trainer's pods, simulated faithfully (docs/CLUSTERS.md): two
network-namespace hosts named as Trainer names a TrainJob's node pods
(job-node-0-0 and job-node-0-1, under the headless service `job`), each with
an /etc/hosts as the kubelet writes it (its own name only), and the
environment Trainer's plugins set, nothing more.

- torch: every pod runs `ddplaunch train.py` with exactly the PET_* variables
  Trainer's torch plugin sets; node 1 starts first, while node 0's name does
  not resolve yet (its DNS record comes with its pod).
- MPI: every pod has Trainer's hostfile at /etc/mpi/hostfile and runs
  `ddplaunch -- python3 app.py` (mpi4py), with no ssh key, no sshd and no
  launcher pod."""
import os
import re
import shutil
import subprocess

import pytest
from conftest import BIN, SOURCE_DIR, finish, needs_torch, read_until, succeeded

import netns

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))

PODS = ["job-node-0-0", "job-node-0-1"]
# What every pod of a cluster has, and a pod's PATH: its image's Python
# (Debian's, with python3-torch and mpi4py) and ddplaunch.
POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "PATH": f"{os.path.dirname(BIN)}:/usr/bin:/bin"}


@pytest.fixture
def pods():
    h = netns.Hosts(len(PODS), names=PODS)
    try:
        for name in PODS:
            kubelet_hosts(h, name)
        yield h
    finally:
        h.remove()


def kubelet_hosts(h, name, also=()):
    """The pod's /etc/hosts as the kubelet writes it: its own address and
    names, and (here) the names in `also`, as DNS would answer them."""
    lines = ["127.0.0.1\tlocalhost"]
    for pod in (name, *also):
        lines.append(f"{h.addrs[pod]}\t{pod}.job\t{pod}")
    with open(os.path.join(h.etc(name), "hosts"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _start(jobs, h, name, argv, env, cwd):
    """`argv` in pod `name`, with the pod's environment and `env`."""
    p = subprocess.Popen(h.command(name, argv), env=jobs.env({**POD_ENV, "HOSTNAME": name, **env}),
                         cwd=cwd, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    jobs.procs.append(p)
    return p


@needs_torch
def test_trainers_torch_pods_run_ddplaunch_train_py(jobs, pods, tmp_path):
    shutil.copy(os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py"), tmp_path / "train.py")
    # Trainer's torch plugin: the same four in every pod, and the pod's rank.
    pet = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto", "PET_MASTER_ADDR": "job-node-0-0.job",
           "PET_MASTER_PORT": "29500"}
    node1 = _start(jobs, pods, "job-node-0-1", [BIN, "train.py"], {**pet, "PET_NODE_RANK": "1"},
                   tmp_path)
    waited = read_until(node1.stderr, "waiting for --master-addr job-node-0-0.job to resolve")
    assert waited and "to resolve" in waited[-1], waited
    # Node 0's pod is up: its name now resolves from node 1.
    kubelet_hosts(pods, "job-node-0-1", also=["job-node-0-0"])
    node0 = _start(jobs, pods, "job-node-0-0", [BIN, "train.py"], {**pet, "PET_NODE_RANK": "0"},
                   tmp_path)
    (rc0, out0, err0), (rc1, out1, err1) = finish([node0, node1], timeout=300)
    assert rc0 == 0 and rc1 == 0, err0 + "".join(waited) + err1
    ranks = sorted(re.findall(r"rank (\d)/(\d): all-reduce", out0 + out1))
    cpus = len(ranks) // 2
    assert cpus >= 1 and ranks == [(str(r), str(2 * cpus)) for r in range(2 * cpus)], out0 + out1


MPI_APP = """from mpi4py import MPI
comm = MPI.COMM_WORLD
names = comm.allgather(MPI.Get_processor_name())
print(f"rank {comm.rank} of {comm.size}: allgather {sorted(set(names))}", flush=True)
"""


def test_trainers_mpi_pods_run_mpi4py_from_the_hostfile_without_ssh(jobs, pods, tmp_path):
    (tmp_path / "app.py").write_text(MPI_APP)
    created = not os.path.exists("/etc/mpi")  # where `ip netns exec` binds each pod's /etc/mpi
    os.makedirs("/etc/mpi", exist_ok=True)
    try:
        for name in PODS:
            # Trainer's MPI plugin's ConfigMap, mounted at /etc/mpi; the
            # pods' names resolve through the service from the start.
            kubelet_hosts(pods, name, also=[p for p in PODS if p != name])
            os.makedirs(os.path.join(pods.etc(name), "mpi"))
            with open(os.path.join(pods.etc(name), "mpi", "hostfile"), "w") as f:
                f.write("".join(f"{p}.job slots=2\n" for p in PODS))
        procs = [_start(jobs, pods, name, [BIN, "--", "python3", "app.py"], {}, tmp_path)
                 for name in PODS]
        results = finish(procs, timeout=300)
    finally:
        if created:
            shutil.rmtree("/etc/mpi", ignore_errors=True)
    out = succeeded(results)
    for rank in range(4):
        assert f"rank {rank} of 4: allgather ['job-node-0-0', 'job-node-0-1']" in out, out
