#include "proc/starter.hpp"

#include <fcntl.h>
#include <spawn.h>

#include <cstring>

#include "config/launch_error.hpp"
#include "posix/fd.hpp"
#include "posix/signals.hpp"
#include "proc/reap.hpp"

extern char** environ;

namespace ddplaunch {

namespace {

// posix_spawn's attributes and file actions, destroyed with it.
struct Spawning {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  Spawning() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
  }
  ~Spawning() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  Spawning(const Spawning&) = delete;
  Spawning& operator=(const Spawning&) = delete;
};

}  // namespace

Child ProcessStarter::start(const ChildStart& spec) {
  Spawning s;
  // Its stdio: the child's ends of the pipes, dup'd onto 0-2 (every fd of
  // ours is close-on-exec, so nothing else leaks into it).
  std::optional<posix::Pipe> in, out, err;
  if (spec.stdin_pipe) {
    in = posix::make_pipe();
    posix_spawn_file_actions_adddup2(&s.actions, in->read.get(), 0);
  } else {
    posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  }
  if (spec.output_path.empty()) {
    out = posix::make_pipe();
    err = posix::make_pipe();
    posix_spawn_file_actions_adddup2(&s.actions, out->write.get(), 1);
    posix_spawn_file_actions_adddup2(&s.actions, err->write.get(), 2);
  } else {
    posix_spawn_file_actions_addopen(&s.actions, 1, spec.output_path.c_str(), O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&s.actions, 1, 2);
  }
  // The signals as a worker gets them: the mask empty, and the ones the
  // launcher ignores for itself back to their default action.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  const posix::SignalReset reset = posix::signals_to_reset();
  for (int i = 0; i < reset.count; ++i) {
    sigaddset(&defaults, reset.signals[i]);
  }
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (spec.own_group) {
    posix_spawnattr_setpgroup(&s.attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&s.attr, flags);
  std::vector<char*> argv;
  for (const auto& a : spec.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  pid_t pid = -1;
  // posix_spawnp searches PATH for a name without a slash, as execvp does;
  // glibc reports a failed exec as its result.
  const int rc = posix_spawnp(&pid, argv[0], &s.actions, &s.attr, argv.data(), environ);
  if (rc != 0) {
    throw LaunchError(k_exit_cannot_execute,
                      "cannot execute '" + spec.argv.front() + "': " + std::strerror(rc) +
                          (spec.argv.front() == "ssh" ? " (install openssh-client)" : ""));
  }
  // Our ends are read and written from an event loop.
  for (auto* pipe_end :
       {in ? &in->write : nullptr, out ? &out->read : nullptr, err ? &err->read : nullptr}) {
    if (pipe_end != nullptr) {
      posix::set_nonblocking(pipe_end->get());
    }
  }
  Child child(pid, out ? std::move(out->read) : posix::Fd(),
              err ? std::move(err->read) : posix::Fd(), spec.own_group);
  if (in) {
    child.in() = std::move(in->write);
  }
  return child;
}

std::optional<std::pair<pid_t, ExitInfo>> ProcessStarter::reap() {
  return reap_any();
}

}  // namespace ddplaunch
