/* Runs a command and prints its peak resident set in KiB: the largest
 * ru_maxrss of the process tree that wait4 reports for it. The child starts
 * with fork() from this small program, so what it inherits before exec is
 * this program's own RSS (about 1 MiB): an upper bound, close to the truth.
 *
 *   peak_rss OUTFILE command [args...]   writes the number to OUTFILE; the
 *                                        command's own output goes where ours goes
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: peak_rss OUTFILE command [args...]\n");
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    perror("exec");
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (wait4(pid, &status, 0, &usage) < 0) {
    perror("wait4");
    return 1;
  }
  FILE* out = fopen(argv[1], "w");
  if (out == NULL) {
    perror(argv[1]);
    return 1;
  }
  fprintf(out, "%ld\n", usage.ru_maxrss);
  fclose(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
