"""An mpi4py worker: comm.allreduce of the ranks and comm.bcast of rank 0's
word; one line per rank: "mpi4py rank R size S sum X word W RANK=<RANK>"."""
import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank, op=MPI.SUM)
word = comm.bcast("hello-from-0" if rank == 0 else None, root=0)
print(f"mpi4py rank {rank} size {size} sum {total} word {word} RANK={os.environ.get('RANK')}",
      flush=True)
