"""Hosts for tests: network namespaces on one machine, each its own host.

Each host is a network namespace with its own loopback, an eth0 (one end of a
veth pair whose other end sits on a bridge in a 'switch' namespace), its own
address on one /24, its own host name (a UTS namespace made by `unshare` for
each command) and its own /etc/hosts (ip netns exec binds /etc/netns/NAME/hosts
over /etc/hosts), which carries Debian's `127.0.1.1 <own name>` self entry,
as a freshly installed Debian host does. Needs root and iproute2.
"""
import os
import random
import shutil
import socket
import subprocess
import uuid


def available():
    """Why the hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2 and util-linux (ip, unshare)"
    probe = "ddpl-probe-" + uuid.uuid4().hex[:6]
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "cannot create network namespaces: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class Hosts:
    """`count` hosts named <prefix>0.. on one network; remove() undoes everything."""

    def __init__(self, count, prefix="node", extra_hosts=(), names=None):
        self.id = uuid.uuid4().hex[:6]
        self.subnet = f"10.{random.randint(64, 250)}.{random.randint(1, 250)}"
        self.names = list(names) if names else [f"{prefix}{i}" for i in range(count)]
        self.addrs = {n: f"{self.subnet}.{i + 1}" for i, n in enumerate(self.names)}
        for i, n in enumerate(extra_hosts):
            self.addrs[n] = f"{self.subnet}.{100 + i}"
        self.namespaces = {}
        self.prefix = f"ddpl-{self.id}-"  # a host's namespace is prefix + name
        self.switch = f"ddpl-{self.id}-sw"
        try:
            self._create()
        except Exception:
            self.remove()
            raise

    def _create(self):
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(self.addrs):
            ns = f"ddpl-{self.id}-{name}"
            _ip("netns", "add", ns)
            self.namespaces[name] = ns
            here, there = f"dl{self.id}h{i}", f"dl{self.id}p{i}"
            _ip("link", "add", here, "type", "veth", "peer", "name", there)
            _ip("link", "set", here, "netns", ns)
            _ip("link", "set", there, "netns", self.switch)
            _ip("-n", self.switch, "link", "set", there, "master", "br0", "up")
            _ip("-n", ns, "link", "set", here, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.addrs[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            etc = f"/etc/netns/{ns}"
            os.makedirs(etc, exist_ok=True)
            with open(f"{etc}/hosts", "w") as f:
                f.write(f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n")
                for other, addr in self.addrs.items():
                    if other != name:
                        f.write(f"{addr}\t{other}\n")

    def command(self, host, argv):
        """argv run on `host`: in its network namespace, under its own host name."""
        script = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                script, host, *[str(a) for a in argv]]

    def etc(self, host):
        """The directory `ip netns exec` binds over /etc on `host`, file by
        file (its hosts, and whatever a test puts there)."""
        return f"/etc/netns/{self.namespaces[host]}"

    def free_port(self, host):
        """A port free on `host` a moment ago (bound to port 0 there)."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.namespaces[host], "/usr/bin/python3", "-c",
             "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"],
            check=True, capture_output=True, text=True).stdout
        return int(out)

    def remove(self):
        for ns in list(self.namespaces.values()) + [self.switch]:
            # Whatever still runs in a host goes with it.
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        self.namespaces = {}
