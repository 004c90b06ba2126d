"""A PyTorch gloo job that fails once: in round 0 rank 1 dies after joining
the process group (the others then fail in their next collective, or are
stopped); in round 1 every rank checks that the group is whole again.

    ddplaunch --max-restarts 1 ... /usr/bin/python3 tests/helpers/torch_restart.py

Prints "round R: group of N whole, all-reduce S" on success.
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if restart == 0 and rank == 1:
        print("rank 1 fails in round 0", file=sys.stderr, flush=True)
        os._exit(3)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) // 2
    if int(t.item()) != expected or world != int(os.environ["WORLD_SIZE"]):
        print(f"rank {rank}: all-reduce {t.item()} != {expected}", file=sys.stderr)
        sys.exit(1)
    print(f"round {restart}: group of {world} whole, all-reduce {int(t.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
