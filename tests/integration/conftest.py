"""Shared fixtures: the built binaries, a job runner, and a leak check.

Every job a test starts carries DDPLAUNCH_TEST_MARKER=<unique id> in its
environment; workers and their descendants inherit it. After each test,
any live process still carrying the marker is a leak: the test fails and
the process is killed.
"""
import json
import os
import random
import re
import signal
import socket
import subprocess
import time
import uuid

import pytest

BIN = os.path.abspath(os.environ.get("DDPLAUNCH_BIN", os.path.join(os.path.dirname(__file__), "../../build/ddplaunch")))
WORKER = os.path.abspath(os.environ.get(
    "DDPLAUNCH_WORKER", os.path.join(os.path.dirname(__file__), "../../build/tests/ddplaunch_worker")))
SOURCE_DIR = os.environ.get("DDPLAUNCH_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
TORCH_PYTHON = "/usr/bin/python3"


def _torch_ok():
    return os.path.exists(TORCH_PYTHON) and subprocess.run(
        [TORCH_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0


# The suite's run against a sanitizer build of ddplaunch (ASan+UBSan, TSan).
UNDER_SANITIZER = bool(os.environ.get("DDPLAUNCH_SANITIZE"))


def _needs_torch():
    """Real PyTorch (Debian's python3-torch, under /usr/bin/python3). Not
    under the sanitizers: a PyTorch rank drives the launcher through the paths
    the suite's own workers take (the same spawns, store, pump and verdicts),
    and its seconds of importing torch are spent outside the code the
    sanitizers watch."""
    if UNDER_SANITIZER:
        return pytest.mark.skip(reason="real PyTorch: run by the main suite, not under sanitizers")
    return pytest.mark.skipif(not _torch_ok(), reason="python3-torch is not installed")


needs_torch = _needs_torch()


def processes_with_marker(marker):
    found = []
    needle = ("DDPLAUNCH_TEST_MARKER=" + marker).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in env.split(b"\0"):
            found.append(int(pid))
    return found


def read_until(stream, fragment, limit=1000):
    """Reads lines from `stream` until one contains `fragment` (a string, or a
    compiled regex that matches it); returns the lines read."""
    lines = []
    for _ in range(limit):
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        if fragment.search(line) if isinstance(fragment, re.Pattern) else fragment in line:
            break
    return lines


def all_stopped(pid):
    """True once every thread of `pid` is stopped (SIGSTOP reaches threads one by one)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
    return all(s in ("T", "t") for s in states)


def alive(pid):
    """True while `pid` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A loopback port that was free a moment ago, and that no connect() will take.

    A port from bind(("127.0.0.1", 0)) lies in the kernel's ephemeral range, from
    which every outgoing connection on the machine takes its local port too: under
    ctest -j2 another test's connection could take it between this check and the
    agents' bind, and a job's nodes would then miss each other. So the port is
    drawn at random from below that range (only explicit binds use it) and
    checked by binding it.
    """
    low, _ = _ephemeral_range()
    top = max(low - 1, 2048)
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(max(1024, top // 2), top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every draw taken: what the kernel gives
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout=30.0, interval=0.01):
    """Polls `predicate` until true; for conditions with no event to wait on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


class Jobs:
    def __init__(self, tmp_path):
        self.marker = uuid.uuid4().hex
        self.tmp_path = tmp_path
        self.procs = []

    def env(self, extra=None):
        env = dict(os.environ)
        env["DDPLAUNCH_TEST_MARKER"] = self.marker
        env.pop("OMP_NUM_THREADS", None)
        for name in [n for n in env if n.startswith("PET_")]:
            del env[name]  # torchrun-style option defaults from the caller's environment
        if extra:
            env.update(extra)
        return env

    def start(self, args, env=None, **kwargs):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen([BIN] + [str(a) for a in args], env=self.env(env), text=True, **kwargs)
        self.procs.append(p)
        return p

    def run(self, args, env=None, timeout=120, input=None, **kwargs):
        if input is not None:
            kwargs["stdin"] = subprocess.PIPE
        p = self.start(args, env=env, **kwargs)
        out, err = p.communicate(input=input, timeout=timeout)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def report(self):
        """For a failed test: each started process still running, with its
        descendants and what each waits in, then the end of every launcher's
        stderr that no one read (the launchers are killed to read it)."""
        lines = []
        for p in self.procs:
            if p.poll() is None:
                tree = _descendants(p.pid)
                ps = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,etimes,args", "-p",
                                     ",".join(map(str, tree))], capture_output=True, text=True)
                lines.append(f"--- still running: {' '.join(map(str, p.args))[:200]}\n{ps.stdout}")
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                _, err = p.communicate(timeout=10)
            except (ValueError, OSError, subprocess.TimeoutExpired):
                continue
            if err:
                if len(err) > 8000:
                    err = f"{err[:3000]}\n[... {len(err) - 6000} characters ...]\n{err[-3000:]}"
                lines.append(f"--- stderr of pid {p.pid} (exit {p.returncode}):\n{err}")
        return "\n".join(lines)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        # Give PR_SET_PDEATHSIG'd workers a moment to be reaped by init.
        leaked = wait_until(lambda: not processes_with_marker(self.marker), timeout=5) or []
        leaked = processes_with_marker(self.marker)
        for pid in leaked:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return leaked


def finish(procs, timeout=300):
    """(returncode, stdout, stderr) of each started process, once it ends."""
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        results.append((p.returncode, out, err))
    return results


def succeeded(results):
    """The stdout of every process of finish()'s `results`, once each ended 0."""
    for rc, _, stderr in results:
        assert rc == 0, stderr
    return "".join(stdout for _, stdout, _ in results)


def parent_of(pid):
    """The parent pid of `pid` (from /proc), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(pid):
    """pid and every process below it."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(parent_of(entry), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo.extend(children.get(out[-1], []))
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report gets its jobs' state, taken at once: before any
    fixture's teardown (a namespace's removal kills what runs in it)."""
    outcome = yield
    report = outcome.get_result()
    j = getattr(item, "funcargs", {}).get("jobs")
    if report.when == "call" and report.failed and isinstance(j, Jobs):
        text = j.report()
        if text:
            report.sections.append(("the test's launchers", text))


def _netns_hosts(count):
    import netns  # root and iproute2: the tests that use these skip without them
    h = netns.Hosts(count)
    yield h
    h.remove()


@pytest.fixture
def hosts():
    """Two hosts, node0 and node1, in network namespaces (netns.py)."""
    yield from _netns_hosts(2)


@pytest.fixture
def three_hosts():
    """Three hosts, node0 to node2, in network namespaces (netns.py)."""
    yield from _netns_hosts(3)


@pytest.fixture
def jobs(tmp_path):
    j = Jobs(tmp_path)
    yield j
    leaked = j.cleanup()
    assert not leaked, f"processes left running after the test: {leaked}"


def env_lines(stdout):
    """{rank: environment} from the JSON lines the helper's `env` step prints."""
    by_rank = {}
    for line in stdout.splitlines():
        m = re.match(r"^\[rank (\d+)\]: (\{.*\})$", line)
        if m:
            by_rank[int(m.group(1))] = json.loads(m.group(2))
    return by_rank


def worker(*steps):
    return [WORKER] + list(steps)
