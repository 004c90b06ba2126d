"""A real PyTorch job for ddplaunch: gloo process group, all-reduce, a few DDP steps.

    ddplaunch --nproc-per-node 2 --python /usr/bin/python3 examples/ddp_gloo.py

Every rank joins the process group from the environment ddplaunch sets
(init_method="env://": MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), checks an
all-reduce, trains a tiny model with DistributedDataParallel, and checks that
the replicas still agree. Exits non-zero if anything disagrees.

    ddplaunch --env-style torch,mpi ... examples/ddp_gloo.py 5 mpi

takes the rank, world size and master the way MPI-based set-ups read them
(OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, AZ_BATCH_MASTER_NODE), and checks
that they agree with torch's.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if len(sys.argv) > 2 and sys.argv[2] == "mpi":
        mpi_rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        assert mpi_rank == int(os.environ["RANK"]), "OMPI_COMM_WORLD_RANK differs from RANK"
        dist.init_process_group("gloo", init_method="tcp://" + os.environ["AZ_BATCH_MASTER_NODE"],
                                rank=mpi_rank, world_size=int(os.environ["OMPI_COMM_WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]), "process group size differs from WORLD_SIZE"

    # All-reduce: sum of (rank + 1) over every rank.
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    if t.item() != expected:
        print(f"all-reduce gave {t.item()}, expected {expected}", file=sys.stderr)
        return 1

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)  # different data on each rank
    for _ in range(steps):
        x = torch.randn(16, 8, generator=gen)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    # Replicas agree if every rank holds the same weights.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    agree = all(torch.equal(gathered[0], g) for g in gathered)
    print(f"rank {rank}/{world}: all-reduce {t.item():g}, loss {loss.item():.4f}, "
          f"replicas {'agree' if agree else 'DIFFER'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
