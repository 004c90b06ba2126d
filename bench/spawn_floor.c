/* The physical floor for launching N copies of a program: posix_spawn them all, wait for all. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spawn_floor N program [args...]\n");
    return 2;
  }
  int n = atoi(argv[1]);
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ) != 0) {
      perror("posix_spawnp");
      return 1;
    }
  }
  int status, rc = 0;
  while (wait(&status) > 0) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      rc = 1;
    }
  }
  return rc;
}
