// A worker that is an MPI program: MPI_Init, its rank and size, an
// MPI_Allreduce of the ranks and a ring send/recv, then MPI_Finalize. It
// prints one line: "mpi rank R size S sum X from P RANK=<ddplaunch's RANK>".
// One argument makes one rank misbehave, for the tests of what ddplaunch
// makes of it:
//   abort:R:CODE       rank R calls MPI_Abort(MPI_COMM_WORLD, CODE); the others wait in a barrier
//   nofinalize:R       rank R exits 0 right after MPI_Init; the others wait in a barrier
//   hang:R             every rank but R waits in a barrier, R in pause(): the test kills one
//   fail-first-round:R rank R exits 3 after MPI_Init when TORCHELASTIC_RESTART_COUNT is 0
//   hosts              each rank also prints the host of every rank as its PMIx server
//                      described them: "rank R sees hosts H0 H1 ..." (built with libpmix)
//   topology           each rank also prints the machine's topology as its PMIx server
//                      shares it (PMIX_HWLOC_XML_V2, what Open MPI reads):
//                      "rank R topology BYTES HASH machine=yes|no"
//   required           each rank also calls PMIx_Fence across the job with a directive its
//                      server cannot know, marked required (PMIX_INFO_REQD), and prints
//                      "rank R required fence: <PMIx status>" (built with libpmix)
//   barriers:N         every rank does N barriers, then rank 0 prints
//                      "barriers N took S seconds" (a waiting rank's cost)
//   show:A,B,...       each rank prints "rank R A=<value>" for each variable, as it found
//                      them before MPI_Init ("-" when unset); also as a second argument
//   ticks:N            rank 0 prints "tick K" N times (0: until killed), 0.2 s apart,
//                      without flushing
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if HELLO_HAVE_PMIX
#include <pmix.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
/* Open MPI keeps what MPI_Init allocates; those leaks are its own. */
const char* __asan_default_options(void) {
  return "detect_leaks=0";
}
#endif

// The PMIx client Open MPI initialised (PMIx_Init counts its callers):
// every rank's PMIX_HOSTNAME, from the server's node and process maps.
static void print_hosts(int rank, int size) {
#if HELLO_HAVE_PMIX
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    printf("rank %d sees hosts: PMIx_Init failed\n", rank);
    return;
  }
  printf("rank %d sees hosts", rank);
  for (int r = 0; r < size; ++r) {
    pmix_proc_t peer = me;
    peer.rank = (pmix_rank_t)r;
    pmix_value_t* value = NULL;
    if (PMIx_Get(&peer, PMIX_HOSTNAME, NULL, 0, &value) == PMIX_SUCCESS && value != NULL &&
        value->type == PMIX_STRING) {
      printf(" %s", value->data.string);
    } else {
      printf(" ?");
    }
  }
  printf("\n");
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
#else
  printf("rank %d sees hosts: built without libpmix\n", rank);
  (void)size;
#endif
}

// The topology's XML the server shares, as its length and FNV-1a hash.
static void print_topology(int rank) {
#if HELLO_HAVE_PMIX
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    printf("rank %d topology: PMIx_Init failed\n", rank);
    return;
  }
  pmix_proc_t job = me;
  job.rank = PMIX_RANK_WILDCARD;
  pmix_value_t* value = NULL;
  if (PMIx_Get(&job, PMIX_HWLOC_XML_V2, NULL, 0, &value) == PMIX_SUCCESS && value != NULL &&
      value->type == PMIX_STRING) {
    const char* xml = value->data.string;
    unsigned long long hash = 1469598103934665603ULL;
    for (const char* c = xml; *c != '\0'; ++c) {
      hash = (hash ^ (unsigned char)*c) * 1099511628211ULL;
    }
    printf("rank %d topology %zu %016llx machine=%s\n", rank, strlen(xml), hash,
           strstr(xml, "type=\"Machine\"") != NULL ? "yes" : "no");
  } else {
    printf("rank %d topology: none\n", rank);
  }
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
#else
  printf("rank %d topology: built without libpmix\n", rank);
#endif
}

// A fence whose required directive the server does not know: PMIx says
// the server must refuse it (PMIX_ERR_NOT_SUPPORTED), not ignore it.
static void required_fence(int rank) {
#if HELLO_HAVE_PMIX
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    printf("rank %d required fence: PMIx_Init failed\n", rank);
    return;
  }
  pmix_proc_t all = me;
  all.rank = PMIX_RANK_WILDCARD;
  pmix_info_t info;
  bool yes = true;
  PMIX_INFO_LOAD(&info, "ddplaunch.test.no-such-directive", &yes, PMIX_BOOL);
  PMIX_INFO_REQUIRED(&info);
  const pmix_status_t rc = PMIx_Fence(&all, 1, &info, 1);
  printf("rank %d required fence: %s\n", rank, PMIx_Error_string(rc));
  fflush(stdout);
  PMIX_INFO_DESTRUCT(&info);
  PMIx_Finalize(NULL, 0);
#else
  printf("rank %d required fence: built without libpmix\n", rank);
#endif
}

static int target_rank(const char* arg, const char* mode) {
  size_t n = strlen(mode);
  return strncmp(arg, mode, n) == 0 && arg[n] == ':' ? atoi(arg + n + 1) : -1;
}

// show:A,B: the values before MPI_Init, printed once the rank is known.
static char g_shown[4096];

static void note_variables(int argc, char** argv) {
  const char* mode = NULL;
  for (int i = 1; i < argc; ++i) {
    mode = strncmp(argv[i], "show:", 5) == 0 ? argv[i] : mode;
  }
  if (mode == NULL) {
    return;
  }
  char names[1024];
  snprintf(names, sizeof names, "%s", mode + 5);
  size_t used = 0;
  for (char* name = strtok(names, ","); name != NULL; name = strtok(NULL, ",")) {
    const char* value = getenv(name);
    used += (size_t)snprintf(g_shown + used, sizeof g_shown - used, " %s=%s", name,
                             value != NULL ? value : "-");
    if (used >= sizeof g_shown) {
      break;
    }
  }
}

int main(int argc, char** argv) {
  int rank = -1, size = -1;
  const char* mode = argc > 1 ? argv[1] : "";
  note_variables(argc, argv);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (target_rank(mode, "abort") == rank) {
    const char* code = strchr(strchr(mode, ':') + 1, ':');
    fprintf(stderr, "rank %d aborts\n", rank);
    MPI_Abort(MPI_COMM_WORLD, code != NULL ? atoi(code + 1) : 1);
  } else if (target_rank(mode, "nofinalize") == rank) {
    fprintf(stderr, "rank %d leaves without MPI_Finalize\n", rank);
    fflush(stderr);
    return 0;
  } else if (target_rank(mode, "hang") == rank) {
    printf("pid %d waits\n", (int)getpid());
    fflush(stdout);
    pause();
  } else if (target_rank(mode, "fail-first-round") == rank) {
    const char* round = getenv("TORCHELASTIC_RESTART_COUNT");
    if (round != NULL && strcmp(round, "0") == 0) {
      fprintf(stderr, "rank %d fails in round 0\n", rank);
      return 3;
    }
  }
  if (target_rank(mode, "abort") >= 0 || target_rank(mode, "nofinalize") >= 0 ||
      target_rank(mode, "hang") >= 0) {
    printf("pid %d in barrier\n", (int)getpid());
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (strcmp(mode, "hosts") == 0) {
    print_hosts(rank, size);
  }
  if (strcmp(mode, "topology") == 0) {
    print_topology(rank);
  }
  if (strcmp(mode, "required") == 0) {
    required_fence(rank);
  }
  if (g_shown[0] != '\0') {
    printf("rank %d%s\n", rank, g_shown);
    fflush(stdout);
  }
  if (strncmp(mode, "barriers:", 9) == 0) {
    const int count = atoi(mode + 9);
    const double start = MPI_Wtime();
    for (int i = 0; i < count; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) {
      printf("barriers %d took %.3f seconds\n", count, MPI_Wtime() - start);
      fflush(stdout);
    }
  }
  if (strncmp(mode, "ticks:", 6) == 0 && rank == 0) {
    const int count = atoi(mode + 6);
    for (int i = 0; count == 0 || i < count; ++i) {
      printf("tick %d\n", i);  // no fflush: as a program's stdio buffers it
      usleep(200 * 1000);
    }
  }
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int from = -1;
  MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 0, &from, 1, MPI_INT, (rank + size - 1) % size,
               0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const char* ddp_rank = getenv("RANK");
  printf("mpi rank %d size %d sum %d from %d RANK=%s\n", rank, size, sum, from,
         ddp_rank != NULL ? ddp_rank : "-");
  MPI_Finalize();
  return 0;
}
