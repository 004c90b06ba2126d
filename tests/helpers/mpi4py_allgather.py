"""An mpi4py worker: comm.allgather of every rank's host name; one line per
rank: "allgather rank R size S restarts N hosts H0,H1,...". With `hold` as
its argument, the ranks of the job's first round then wait to be stopped
(a restart's next round ends at once), and its rank 0 first runs
`ddplaunch status --json` and `ddplaunch stacks` as a user in a worker's
shell would, once every rank has allgathered: "status ranks R nodes N" and
"stacks exit C ranks R"."""
import json
import os
import re
import socket
import subprocess
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
    comm.Barrier()
    if rank == 0:
        exe = os.environ["DDPLAUNCH_EXE"]
        doc = json.loads(subprocess.run([exe, "status", "--json"], capture_output=True, text=True,
                                        check=True).stdout)
        print(f"status ranks {len(doc['ranks'])} nodes {doc['job']['nnodes']}", flush=True)
        stacks = subprocess.run([exe, "stacks", "--json", "--timeout", "60"], capture_output=True,
                                text=True)
        shown = len(set(re.findall(r'"rank":\s*(\d+)', stacks.stdout)))
        print(f"stacks exit {stacks.returncode} ranks {shown}", flush=True)
    while True:
        time.sleep(3600)
