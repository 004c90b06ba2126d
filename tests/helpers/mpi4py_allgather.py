"""An mpi4py worker: comm.allgather of every rank's host name; one line per
rank: "allgather rank R size S restarts N hosts H0,H1,...". With `hold` as
its argument, the ranks of the job's first round then wait to be stopped
(a restart's next round ends at once)."""
import os
import socket
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
hosts = comm.allgather(socket.gethostname())
restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"allgather rank {rank} size {size} restarts {restarts} node {os.environ.get('GROUP_RANK')} "
      f"hosts {','.join(hosts)}", flush=True)
if sys.argv[1:] == ["hold"] and restarts == "0":
    while True:
        time.sleep(3600)
