"""What the bench scripts share: a free loopback port and the fd limit."""
import resource
import socket


def free_port():
    """A loopback port free a moment ago (bound to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_fds():
    """Raises the soft fd limit to the hard one (a preexec_fn for big jobs)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
