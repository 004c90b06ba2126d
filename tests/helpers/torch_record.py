"""A PyTorch script using @record: rank FAIL_RANK (default 1) raises, and then
buries its traceback under many more lines of stderr at exit, as logging
shutdown noise or a framework's atexit handlers do (NOISE_LINES of them,
default 300)."""
import atexit
import os
import sys

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == int(os.environ.get("FAIL_RANK", "1")):
        noise = int(os.environ.get("NOISE_LINES", "300"))
        atexit.register(lambda: [print(f"noise line {i}", file=sys.stderr) for i in range(noise)])
        raise ValueError(f"loss is nan at step 7 on rank {rank} (é)")
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
