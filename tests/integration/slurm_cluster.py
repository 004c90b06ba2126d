"""A real two-host Slurm cluster for tests, made from Debian's packages.

One controller host ("ctl") and compute hosts node0, node1, ... are network
namespaces on one bridge (netns.Hosts), each with its own address, host name
and /etc/hosts. munged runs with its own key and socket; slurmctld runs on
ctl in its own UTS namespace (it insists that the host name matches
SlurmctldHost); one slurmd per compute host enters only that host's network
namespace (nsenter --net: `ip netns exec` remounts /sys, and slurmd always
starts its cgroup plugin) plus its own UTS and mount namespaces, where the
host's /etc/hosts is bound over the machine's. The hosts share /tmp, so TmpFS
is per node (`%n`). Everything lives in one directory, removed by stop().
Client commands (srun, sbatch, scancel, squeue) run on ctl with SLURM_CONF.
"""
import os
import shutil
import subprocess
import tempfile
import time

import netns

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "mungekey")


def available():
    why = netns.available()
    if why:
        return why
    missing = [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]
    if missing:
        return "Slurm and munge are not installed (Debian: slurmctld slurmd slurm-client munge): " + \
            ", ".join(missing)
    return None


def _exe(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    def __init__(self, nodes=2, cpus=2):
        self.dir = tempfile.mkdtemp(prefix="ddpl-slurm-")
        os.chmod(self.dir, 0o755)
        self.nodes = [f"node{i}" for i in range(nodes)]
        self.hosts = None
        self.procs = []
        try:
            self.hosts = netns.Hosts(nodes, prefix="node", extra_hosts=("ctl",))
            self._munge()
            self._config(cpus)
            self._start()
        except Exception:
            self.stop()
            raise

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def _munge(self):
        subprocess.run([_exe("mungekey"), "--create", "--keyfile", self.path("munge.key")],
                       check=True, capture_output=True)
        os.chmod(self.path("munge.key"), 0o600)
        subprocess.run([_exe("munged"), "--force", "--socket", self.path("munge.sock"),
                        "--key-file", self.path("munge.key"), "--log-file", self.path("munged.log"),
                        "--pid-file", self.path("munged.pid"), "--seed-file", self.path("munged.seed")],
                       check=True, capture_output=True)

    def _config(self, cpus):
        for d in ("state", "spool", "tmp"):
            os.makedirs(self.path(d), exist_ok=True)
        for n in self.nodes:
            os.makedirs(self.path("tmp", n), exist_ok=True)
            os.makedirs(self.path("spool", n), exist_ok=True)
        nodes = "\n".join(f"NodeName={n} CPUs={cpus} State=UNKNOWN" for n in self.nodes)
        conf = f"""ClusterName=ddpl
SlurmctldHost=ctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.path('munge.sock')}
CryptoType=crypto/munge
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool')}/%n
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd')}.%n.pid
SlurmctldLogFile={self.path('slurmctld.log')}
SlurmdLogFile={self.path('slurmd')}.%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
TmpFS={self.path('tmp')}/%n
KillWait=5
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.path("slurm.conf"), "w") as f:
            f.write(conf)
        with open(self.path("cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")

    def env(self, extra=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env["SLURM_CONF"] = self.path("slurm.conf")
        if extra:
            env.update(extra)
        return env

    def _start(self):
        ctl = self.hosts.command("ctl", [_exe("slurmctld"), "-D", "-c", "-i", "-f",
                                         self.path("slurm.conf")])
        self.procs.append(subprocess.Popen(ctl, env=self.env(), stdout=subprocess.DEVNULL,
                                           stderr=open(self.path("slurmctld.err"), "w")))
        for n in self.nodes:
            ns = f"/var/run/netns/{self.hosts.namespaces[n]}"
            hosts_file = f"/etc/netns/{self.hosts.namespaces[n]}/hosts"
            script = ('hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"')
            argv = ["nsenter", f"--net={ns}", "unshare", "--uts", "--mount", "sh", "-c", script,
                    n, hosts_file, _exe("slurmd"), "-D", "-N", n, "-f", self.path("slurm.conf")]
            self.procs.append(subprocess.Popen(argv, env=self.env(), stdout=subprocess.DEVNULL,
                                               stderr=open(self.path(f"slurmd.{n}.err"), "w")))
        self.wait_idle()

    def run(self, argv, timeout=60, **kwargs):
        """A client command on ctl (srun, sbatch, squeue, ...)."""
        return subprocess.run(self.hosts.command("ctl", argv), env=self.env(kwargs.pop("env", None)),
                              capture_output=True, text=True, timeout=timeout, **kwargs)

    def popen(self, argv, env=None, **kwargs):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.hosts.command("ctl", argv), env=self.env(env), text=True,
                                **kwargs)

    def wait_idle(self, timeout=60):
        """Until every node is idle: sinfo is the only way to ask."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon ended: {p.args}\n" + self.logs())
            r = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
            states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
            if r.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes):
                return
            time.sleep(0.1)
        raise RuntimeError("the Slurm nodes did not become idle:\n" + self.logs())

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".err")):
                with open(self.path(name), errors="replace") as f:
                    out.append(f"--- {name}\n" + f.read()[-3000:])
        return "\n".join(out)

    def processes(self):
        """`ps` lines (with what each waits in) of every process on each node:
        for a failure's message."""
        out = []
        for n in self.nodes:
            pids = subprocess.run(["ip", "netns", "pids", self.hosts.namespaces[n]],
                                  capture_output=True, text=True).stdout.split()
            if pids:
                ps = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,etimes,args", "-p",
                                     ",".join(pids)], capture_output=True, text=True).stdout
                out.append(f"--- processes on {n}\n{ps}")
        return "\n".join(out)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if os.path.exists(self.path("munged.pid")):
            subprocess.run([_exe("munged"), "--stop", "--socket", self.path("munge.sock")],
                           capture_output=True)
        if self.hosts is not None:
            self.hosts.remove()
        shutil.rmtree(self.dir, ignore_errors=True)
