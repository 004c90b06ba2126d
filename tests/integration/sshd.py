"""Hosts that take ssh logins: each network-namespace host of netns.py runs a
real OpenSSH server (Debian's openssh-server) under its own host name, with
a host key and an authorized client key made here. This machine (the root
namespace, "the host side") reaches the hosts through one more veth on
their switch; an ssh client config (`-F`) maps their names to addresses, so
nothing of this machine's own ssh set-up is used or changed.

    hosts = SshHosts(3, tmp_path)       # node0..node2, sshd on each
    hosts.ssh_args                      # "-F <config>" for --ssh-args
    hosts.remove()                      # every process in them, and them
"""
import os
import shutil
import socket
import subprocess
import time

from netns import Hosts


def available():
    """Why ssh hosts cannot be made here, or None."""
    for tool in ("/usr/sbin/sshd", shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not tool or not os.path.exists(tool):
            return "needs openssh-server and openssh-client (quickstart.sh installs them)"
    return None


class SshHosts(Hosts):
    """`count` hosts with sshd. `without_sshd`: hosts that refuse ssh (no
    server listens). `hidden`: {host: directory} that is empty on that host
    (a tmpfs over it in the sshd's own mount namespace): a program there is
    missing on that host only."""

    def __init__(self, count, workdir, without_sshd=(), hidden=None):
        super().__init__(count)
        try:
            self.dir = os.path.join(str(workdir), "ssh")
            os.makedirs(self.dir, exist_ok=True)
            self._reach_from_here()
            self._keys()
            self.servers = {}
            for name in self.names:
                if name not in without_sshd:
                    self._start_sshd(name, (hidden or {}).get(name))
            for name in self.servers:
                self._await_port(self.addrs[name], 22)
        except Exception:
            self.remove()
            raise

    def _reach_from_here(self):
        here, there = f"dl{self.id}r", f"dl{self.id}s"
        subprocess.run(["ip", "link", "add", here, "type", "veth", "peer", "name", there],
                       check=True)
        subprocess.run(["ip", "link", "set", there, "netns", self.switch], check=True)
        subprocess.run(["ip", "-n", self.switch, "link", "set", there, "master", "br0", "up"],
                       check=True)
        subprocess.run(["ip", "addr", "add", f"{self.subnet}.254/24", "dev", here], check=True)
        subprocess.run(["ip", "link", "set", here, "up"], check=True)

    def _keys(self):
        self.client_key = os.path.join(self.dir, "id_ed25519")
        self.host_key = os.path.join(self.dir, "host_ed25519")
        for key in (self.client_key, self.host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        shutil.copy(self.client_key + ".pub", os.path.join(self.dir, "authorized_keys"))
        self.client_config = os.path.join(self.dir, "ssh_config")
        with open(self.client_config, "w") as f:
            for name in self.names:
                f.write(f"Host {name}\n  HostName {self.addrs[name]}\n")
            f.write(f"Host *\n  User root\n  IdentityFile {self.client_key}\n"
                    "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                    "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
        self.ssh_args = f"-F {self.client_config}"

    def _start_sshd(self, name, hidden_dir):
        config = os.path.join(self.dir, f"sshd_{name}")
        with open(config, "w") as f:
            f.write(f"ListenAddress {self.addrs[name]}\nPort 22\nHostKey {self.host_key}\n"
                    f"AuthorizedKeysFile {self.dir}/authorized_keys\nStrictModes no\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\nPidFile none\n"
                    "LogLevel ERROR\n")
        os.makedirs("/run/sshd", exist_ok=True)
        argv = ["/usr/sbin/sshd", "-D", "-e", "-f", config]
        if hidden_dir:
            # A mount namespace of its own: the directory is empty there.
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    'mount -t tmpfs none "$0" && exec "$@"', hidden_dir, *argv]
        self.servers[name] = subprocess.Popen(self.command(name, argv),
                                              stdout=subprocess.DEVNULL,
                                              stderr=open(config + ".log", "w"))

    def _await_port(self, addr, port, timeout=30):
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            try:
                socket.create_connection((addr, port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd on {addr} did not start")

    def processes(self, host):
        """The pids running on `host`, its sshd and the sshd's sessions left out."""
        out = subprocess.run(["ip", "netns", "pids", self.namespaces[host]],
                             capture_output=True, text=True).stdout.split()
        pids = []
        for pid in out:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() in ("sshd", "unshare"):
                        continue
            except OSError:
                continue
            pids.append(int(pid))
        return pids

    def remove(self):
        for p in getattr(self, "servers", {}).values():
            p.kill()
            p.wait()
        super().remove()
