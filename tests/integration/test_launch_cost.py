"""What a launch costs, as counts (never times): the system calls the
launcher makes for each worker it starts, in itself and in the child before
exec, counted with strace. A change that adds a call per worker fails here;
the times are in docs/PERFORMANCE.md (bench/run.py)."""
import collections
import os
import re
import shutil
import subprocess

import pytest
from conftest import BIN

pytestmark = [
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed"),
    # Under ThreadSanitizer vfork is a fork: every spawn then needs the report pipe.
    pytest.mark.skipif(bool(os.environ.get("DDPLAUNCH_SANITIZE")),
                       reason="a sanitizer build starts workers its own way"),
]

PROGRAM = "/bin/true"


def private_tmpdir(tmp_path):
    """A TMPDIR of the test's own, where the launcher keeps its PMIx
    environment cache: another test (with other PMIX_MCA_* settings) cannot
    rewrite it between two counted runs, which would make one of them start
    libpmix's server at once and count that start as a per-worker cost."""
    d = tmp_path / "tmp"
    d.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(d)}


def launcher_calls(tmp_path, nproc, extra=()):
    """System calls by the launcher (every thread) and by each worker before it
    became PROGRAM, by name."""
    trace = tmp_path / f"trace-{nproc}"
    subprocess.run(["strace", "-f", "-qq", "-o", trace, BIN, "--nproc-per-node", str(nproc),
                    "--no-prefix", *extra, "--", PROGRAM], env=private_tmpdir(tmp_path),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    execed, calls = set(), collections.Counter()
    for line in trace.read_text().splitlines():
        m = re.match(r"(\d+)\s+([a-z0-9_]+)\(", line)
        if not m or m.group(1) in execed:
            continue  # a resumed call was counted where it began; a worker after exec is not ours
        pid, name = m.groups()
        if name == "execve" and re.match(rf'\d+\s+execve\("{re.escape(PROGRAM)}"', line):
            execed.add(pid)
        calls[name] += 1
    return calls


def per_worker(tmp_path, extra=()):
    # A first run fills the private cache: both counted runs then find it.
    subprocess.run([BIN, "--no-prefix", *extra, "--", PROGRAM], env=private_tmpdir(tmp_path),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    small, large = launcher_calls(tmp_path, 4, extra), launcher_calls(tmp_path, 36, extra)
    return {name: (large[name] - small[name]) / 32 for name in set(small) | set(large)}


def test_a_worker_costs_a_bounded_number_of_system_calls(tmp_path):
    calls = per_worker(tmp_path, ["--no-pmix"])
    total = sum(calls.values())
    # 27 today: two pipes, two dup3 into the spawn slots, clone3, the child's
    # dozen calls to exec, the pipes' epoll registration, their EOF, the reap.
    assert total <= 29, sorted(calls.items(), key=lambda kv: -kv[1])
    # One epoll_ctl per pipe: closing it takes it out of the epoll (no DEL).
    assert round(calls.get("epoll_ctl", 0)) == 2, calls
    # The PMIx server (the default) registers each worker with libpmix, whose
    # own thread wakes for it: 3 to 5 calls there (how many registrations one
    # wake-up serves depends on timing), none on the main thread's path; one
    # setup_fork serves every worker: nothing else per worker.
    with_server = per_worker(tmp_path)
    assert sum(with_server.values()) <= total + 6, \
        sorted(with_server.items(), key=lambda kv: -kv[1])
    assert with_server.get("getuid", 0) < 0.5, with_server
    # What issue 18 took off the path, per worker: no directory per rank for
    # its error file, no file-system lookups, no third pipe, one fcntl per pipe.
    for name in ("mkdir", "unlinkat", "rmdir", "getdents64", "newfstatat", "access", "openat"):
        assert calls.get(name, 0) < 0.5, (name, calls)
    assert round(calls.get("pipe2", 0)) == 2, calls
    assert round(calls.get("fcntl", 0)) == 2, calls
    assert round(calls.get("rt_sigaction", 0)) <= 1, calls


def test_the_progress_pipe_is_made_only_with_a_hang_timeout(tmp_path):
    assert round(per_worker(tmp_path, ["--hang-timeout", "60"]).get("pipe2", 0)) == 3


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: workers start from one thread")
def test_workers_start_from_two_threads_on_two_cpus(tmp_path):
    # From eight workers on, a second thread starts half of them: while one
    # thread waits for its child's execve, the other starts the next.
    trace = tmp_path / "trace"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=clone3,vfork", "-o", trace, BIN,
                    "--nproc-per-node", "8", "--no-prefix", "--no-pmix", "--", PROGRAM],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    # A worker's clone3 (or vfork, where clone3 is not used), not a thread's.
    worker_clone = re.compile(r"^(\d+)\s+(?:clone3\(\{flags=[A-Z_|]*CLONE_VFORK|vfork\()", re.M)
    starters = collections.Counter(m.group(1) for m in worker_clone.finditer(trace.read_text()))
    assert sorted(starters.values()) == [4, 4], starters


def test_libcrypto_is_loaded_only_when_the_store_authenticates():
    # A launch that never authenticates never pays libcrypto's start-up: it is
    # loaded (dlopen) at the first handshake, here the worker's `store set`.
    script = ('grep -c libcrypto /proc/$PPID/maps; "$DDPLAUNCH_EXE" store set k v && '
              'grep -c libcrypto /proc/$PPID/maps')
    r = subprocess.run([BIN, "--nproc-per-node", "1", "--no-prefix", "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, after = (int(n) for n in r.stdout.split())
    assert before == 0 and after > 0, r.stdout


def test_the_fd_table_has_room_for_every_worker_before_the_first_starts():
    # The kernel grows a process's fd table by doubling as fds are opened;
    # growing one that a thread or a CLONE_FILES child shares waits for an
    # RCU grace period (25 ms on a 16-CPU VM: 24 workers took 31 ms to start
    # where 20 took 4.5). The launcher grows it once, before the first worker
    # starts, so rank 0 already sees room for every worker's pipes.
    nproc = 300
    out = subprocess.run(
        [BIN, "--nproc-per-node", str(nproc), "--no-prefix", "--ranks-filter", "0", "--", "sh",
         "-c", 'grep FDSize /proc/$PPID/status'],
        capture_output=True, text=True, timeout=120, check=True).stdout
    fd_size = int(re.search(r"FDSize:\s+(\d+)", out).group(1))
    assert fd_size >= 2 * nproc, out
