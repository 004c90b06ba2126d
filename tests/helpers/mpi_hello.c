// A worker that calls MPI_Init: under ddplaunch started by mpirun it must be a
// singleton (size 1), not a confused member of the outer mpirun's job.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__SANITIZE_ADDRESS__)
/* Open MPI keeps what MPI_Init allocates; those leaks are its own. */
const char* __asan_default_options(void) {
  return "detect_leaks=0";
}
#endif

int main(int argc, char** argv) {
  int rank = -1, size = -1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  printf("mpi rank %d size %d RANK=%s\n", rank, size, getenv("RANK"));
  MPI_Finalize();
  return 0;
}
