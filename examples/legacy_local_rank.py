"""A torch.distributed.launch-era script (older Hugging Face examples): it
takes its local rank from --local_rank (or --local-rank), not the environment.

    ddplaunch --nproc-per-node 2 --local-rank-arg underscore -- examples/legacy_local_rank.py --epochs 1

Checks that the argument agrees with LOCAL_RANK; exits 1 if not.
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=-1)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
ok = args.local_rank == int(os.environ["LOCAL_RANK"])
print(f"local_rank argument {args.local_rank}, LOCAL_RANK {os.environ['LOCAL_RANK']}: "
      f"{'agree' if ok else 'DISAGREE'}")
sys.exit(0 if ok else 1)
