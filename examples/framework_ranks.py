"""How Lightning, accelerate and DeepSpeed find their rank, run as a worker.

    ddplaunch --nproc-per-node 2 -- examples/framework_ranks.py

Each function below follows the framework's own detection rule (as its
sources read; the frameworks themselves need not be installed), and the
script checks that every one of them finds the rank, local rank, world size
and node that ddplaunch gave in RANK, LOCAL_RANK, WORLD_SIZE and NODE_RANK.
Under srun this is what matters most: Lightning picks its SLURM environment
before torchrun's, so SLURM_PROCID and friends must agree with RANK.
Exits 1 on any disagreement.
"""
import json
import os
import sys

env = os.environ


def lightning():
    # lightning.fabric's cluster environments are tried in order: SLURM first
    # (SLURM_NTASKS set, and the job not an interactive "bash" allocation),
    # then TorchElastic (RANK, GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE all set).
    if "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        # Lightning refuses a step where the task count does not match
        # ntasks-per-node times the nodes: it reads SLURM_NTASKS_PER_NODE.
        per_node = env.get("SLURM_NTASKS_PER_NODE")
        if per_node is not None and int(per_node) * int(env["SLURM_NNODES"]) != int(env["SLURM_NTASKS"]):
            return {"error": "SLURM_NTASKS_PER_NODE * SLURM_NNODES != SLURM_NTASKS"}
        return {"via": "slurm", "rank": int(env["SLURM_PROCID"]), "local_rank": int(env["SLURM_LOCALID"]),
                "world_size": int(env["SLURM_NTASKS"]), "node_rank": int(env["SLURM_NODEID"])}
    if all(k in env for k in ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        return {"via": "torchelastic", "rank": int(env["RANK"]), "local_rank": int(env["LOCAL_RANK"]),
                "world_size": int(env["WORLD_SIZE"]), "node_rank": int(env["GROUP_RANK"])}
    return {"error": "no cluster environment detected"}


def first_int(names, default):
    for name in names:
        if name in env:
            return int(env[name])
    return default


def accelerate():
    # accelerate's PartialState: the first of these variables that is set.
    return {"via": "env", "rank": first_int(["RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK"], 0),
            "local_rank": first_int(["LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "MV2_COMM_WORLD_LOCAL_RANK"], 0),
            "world_size": first_int(["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"], 1)}


def deepspeed():
    # deepspeed.init_distributed: the torch variables when all are set, else
    # MPI discovery (Azure ML's patch reads OMPI_COMM_WORLD_* and AZ_BATCH_MASTER_NODE).
    required = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"]
    if all(k in env for k in required):
        return {"via": "env", "rank": int(env["RANK"]), "local_rank": int(env["LOCAL_RANK"]),
                "world_size": int(env["WORLD_SIZE"])}
    if "OMPI_COMM_WORLD_RANK" in env:
        return {"via": "mpi", "rank": int(env["OMPI_COMM_WORLD_RANK"]),
                "local_rank": int(env["OMPI_COMM_WORLD_LOCAL_RANK"]),
                "world_size": int(env["OMPI_COMM_WORLD_SIZE"])}
    return {"error": "neither the torch variables nor MPI's"}


def main():
    truth = {"rank": int(env["RANK"]), "local_rank": int(env["LOCAL_RANK"]),
             "world_size": int(env["WORLD_SIZE"]), "node_rank": int(env["NODE_RANK"])}
    found = {"lightning": lightning(), "accelerate": accelerate(), "deepspeed": deepspeed()}
    bad = {name: f for name, f in found.items()
           if "error" in f or any(f[k] != v for k, v in truth.items() if k in f)}
    print(json.dumps({"rank": truth["rank"], "agree": not bad,
                      "via": {n: f.get("via") for n, f in found.items()}, "bad": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
