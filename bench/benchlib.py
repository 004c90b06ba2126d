"""What the bench scripts share: a free loopback port, the fd limit, and a
timed run that waits blocking."""
import os
import resource
import signal
import socket
import subprocess
import time


def free_port():
    """A loopback port free a moment ago (bound to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_fds():
    """Raises the soft fd limit to the hard one (a preexec_fn for big jobs)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _alarm(*_):
    raise TimeoutError


def run_timed(cmd, env=None, timeout=10):
    """(seconds, exit code) of one run, its output discarded; (None, None)
    when it ran past `timeout` (its process group is killed). The wait
    blocks, bounded by SIGALRM: Popen.wait(timeout=) polls with growing
    sleeps, which rounds a launch of a few milliseconds up to the next poll."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        code = p.wait()
    except TimeoutError:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return None, None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - t, code
