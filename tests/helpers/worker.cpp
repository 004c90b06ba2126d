// ddplaunch_worker: a small program the integration tests launch as a worker.
// Each argument is one step, run in order: "[@RANKS:]ACTION[=VALUE]", where
// @RANKS (like @1 or @0,2) limits the step to those values of $RANK.
//   env            print the environment as one JSON object line on stdout
//   out=TEXT       print TEXT on stdout          err=TEXT  print TEXT on stderr
//   exit=N         exit with code N              kill=SIG  raise signal SIG (number or name)
//   sleep=SECONDS  sleep                         ignore-term  ignore SIGTERM from now on
//   grandchild     fork a child that sleeps forever in our process group; print its pid
//   escape         fork a child that leaves our group (setsid) and sleeps; print its pid
//   lines=N        print N numbered lines        long=N    print one line of N 'x'
//   partial=TEXT   write TEXT with no newline    chunked=N print N lines, each in 3 writes
//   flood=BYTES    write BYTES of 100-byte lines to stdout, fast
//   seq=N          lines "RANK:K" for K < N on stdout, in 64 KiB writes   seqerr=N  on stderr
//   pidfile=DIR    create DIR/<pid> (tests check every such pid is gone afterwards)
//   ready=DIR      create DIR/ready.<rank>      waitfile=PATH  wait until PATH exists
//   cat            copy stdin to stdout          readfifo=PATH  block in read() on the FIFO PATH
//                                                  until a byte comes (`ddplaunch stacks` sees it)
//   trap=SIG       on SIG, print "caught SIGNAME" and go on   fds  print open fds: "fds 0 1 2"
//   checkpoint=SIG on SIG, print "checkpointed on SIGNAME" and exit 0 (a preempted rank)
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

extern char** environ;

namespace {

void write_str(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) {
      std::exit(3);
    }
    off += static_cast<size_t>(n);
  }
}

void on_trapped(int sig) {
  char msg[64];
  int n = std::snprintf(msg, sizeof(msg), "caught SIG%s\n", sigabbrev_np(sig));
  ssize_t ignored = write(1, msg, static_cast<size_t>(n));
  (void)ignored;
}

void on_checkpoint(int sig) {
  char msg[64];
  int n = std::snprintf(msg, sizeof(msg), "checkpointed on SIG%s\n", sigabbrev_np(sig));
  ssize_t ignored = write(1, msg, static_cast<size_t>(n));
  (void)ignored;
  _exit(0);
}

std::string json_escape(const char* s) {
  std::string out;
  for (; *s; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int parse_signal(const std::string& v) {
  if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) {
    return std::atoi(v.c_str());
  }
  std::string name = v.rfind("SIG", 0) == 0 ? v.substr(3) : v;
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev != nullptr && name == abbrev) {
      return s;
    }
  }
  return SIGTERM;
}

bool rank_matches(const std::string& ranks, const std::string& rank) {
  size_t start = 0;
  while (start <= ranks.size()) {
    size_t end = ranks.find(',', start);
    if (end == std::string::npos) {
      end = ranks.size();
    }
    if (ranks.substr(start, end - start) == rank) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

void sleep_seconds(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

}  // namespace

int main(int argc, char** argv) {
  const char* rank_env = std::getenv("RANK");
  const std::string rank = rank_env ? rank_env : "0";
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    if (step.size() > 1 && step[0] == '@') {
      auto colon = step.find(':');
      if (colon == std::string::npos || !rank_matches(step.substr(1, colon - 1), rank)) {
        continue;
      }
      step = step.substr(colon + 1);
    }
    auto eq = step.find('=');
    std::string action = step.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : step.substr(eq + 1);
    if (action == "env") {
      std::string out = "{";
      for (char** e = environ; *e; ++e) {
        const char* sep = std::strchr(*e, '=');
        if (!sep) {
          continue;
        }
        std::string name(*e, static_cast<size_t>(sep - *e));
        out += (out.size() > 1 ? ",\"" : "\"") + json_escape(name.c_str()) + "\":\"" +
               json_escape(sep + 1) + "\"";
      }
      write_str(1, out + "}\n");
    } else if (action == "out") {
      write_str(1, value + "\n");
    } else if (action == "err") {
      write_str(2, value + "\n");
    } else if (action == "exit") {
      return std::atoi(value.c_str());
    } else if (action == "kill") {
      signal(parse_signal(value), SIG_DFL);
      raise(parse_signal(value));
      sleep_seconds(5);
    } else if (action == "sleep") {
      sleep_seconds(std::atof(value.c_str()));
    } else if (action == "ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (action == "grandchild" || action == "escape") {
      pid_t pid = fork();
      if (pid == 0) {
        if (action == "escape") {
          setsid();
        }
        for (;;) {
          pause();
        }
      }
      write_str(1, action + " " + std::to_string(pid) + "\n");
    } else if (action == "lines") {
      int n = std::atoi(value.c_str());
      std::string out;
      for (int k = 0; k < n; ++k) {
        out += "line " + std::to_string(k) + "\n";
        if (out.size() > 32768) {
          write_str(1, out);
          out.clear();
        }
      }
      write_str(1, out);
    } else if (action == "seq" || action == "seqerr") {
      // Lines "R:K" for K = 0..N-1, in 64 KiB writes that cut lines anywhere.
      const int fd = action == "seq" ? 1 : 2;
      long long n = std::atoll(value.c_str());
      std::string out;
      for (long long k = 0; k < n; ++k) {
        out += rank + ":" + std::to_string(k) + "\n";
        if (out.size() >= 65536) {
          write_str(fd, out.substr(0, 65536));
          out.erase(0, 65536);
        }
      }
      write_str(fd, out);
    } else if (action == "long") {
      write_str(1, std::string(static_cast<size_t>(std::atol(value.c_str())), 'x') + "\n");
    } else if (action == "partial") {
      write_str(1, value);
    } else if (action == "chunked") {
      int n = std::atoi(value.c_str());
      for (int k = 0; k < n; ++k) {
        write_str(1, "rank" + rank + "-");
        sched_yield();
        write_str(1, "line" + std::to_string(k));
        sched_yield();
        write_str(1, "-end\n");
      }
    } else if (action == "flood") {
      long long total = std::atoll(value.c_str());
      std::string line(99, 'a' + static_cast<char>(std::atoi(rank.c_str()) % 26));
      line += '\n';
      std::string block;
      while (block.size() < 64 * 1024) {
        block += line;
      }
      long long written = 0;
      while (written + static_cast<long long>(block.size()) <= total) {
        write_str(1, block);
        written += static_cast<long long>(block.size());
      }
      while (written < total) {
        write_str(1, line);
        written += static_cast<long long>(line.size());
      }
    } else if (action == "pidfile" || action == "ready") {
      std::string path =
          value + "/" + (action == "ready" ? "ready." + rank : std::to_string(getpid()));
      int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) {
        close(fd);
      }
    } else if (action == "waitfile") {
      struct stat st;
      while (stat(value.c_str(), &st) != 0) {
        sleep_seconds(0.01);
      }
    } else if (action == "trap") {
      struct sigaction sa = {};
      sa.sa_handler = on_trapped;
      sa.sa_flags = SA_RESTART;
      sigaction(parse_signal(value), &sa, nullptr);
    } else if (action == "checkpoint") {
      struct sigaction sa = {};
      sa.sa_handler = on_checkpoint;
      sigaction(parse_signal(value), &sa, nullptr);
    } else if (action == "fds") {
      std::string out = "fds";
      for (int fd = 0; fd < 1024; ++fd) {
        if (fcntl(fd, F_GETFD) >= 0) {
          out += " " + std::to_string(fd);
        }
      }
      write_str(1, out + "\n");
    } else if (action == "readfifo") {
      // Read-write: the open never waits for a writer, the read does.
      const int fd = open(value.c_str(), O_RDWR);
      char byte = 0;
      if (fd < 0 || read(fd, &byte, 1) != 1) {
        write_str(2, "ddplaunch_worker: readfifo " + value + ": " + std::strerror(errno) + "\n");
        return 98;
      }
      close(fd);
    } else if (action == "cat") {
      char buf[4096];
      ssize_t n;
      while ((n = read(0, buf, sizeof(buf))) > 0) {
        write_str(1, std::string(buf, static_cast<size_t>(n)));
      }
    } else {
      write_str(2, "ddplaunch_worker: unknown step '" + step + "'\n");
      return 99;
    }
  }
  return 0;
}
