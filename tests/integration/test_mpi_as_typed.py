"""MPI jobs as users type them, with the defaults: the documented two-node
lines with automatic node ranks and the default port (each host a network
namespace of its own, so 29500 is free there), two jobs of one user on one
host at once without --rdzv-id, a host whose ranks outnumber its CPUs, what
Open MPI leaves on disk after every kind of end (each job in a private /tmp
and /dev/shm: a mount namespace), the user's own Open MPI settings, h5py's
MPI build, and the lines of a native rank that never flushes."""
import os
import re
import signal
import subprocess
import tempfile
import threading

import pytest

import netns
from conftest import BIN, TORCH_PYTHON, finish, processes_with_marker, read_until, wait_until

MPI_HELLO = os.environ.get("DDPLAUNCH_MPI_HELLO")
pytestmark = pytest.mark.skipif(not MPI_HELLO, reason="the MPI helper was not built (libopenmpi-dev)")
needs_netns = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
YIELD = "OMPI_MCA_mpi_yield_when_idle"


def results(out):
    """{rank: (size, sum, from, RANK)} from the helper's result lines."""
    return {int(m[1]): (int(m[2]), int(m[3]), int(m[4]), m[5]) for m in
            re.finditer(r"mpi rank (\d+) size (\d+) sum (\d+) from (\d+) RANK=(\S+)", out)}


def one_world(out, n):
    return results(out) == {r: (n, n * (n - 1) // 2, (r + n - 1) % n, str(r)) for r in range(n)}


def shown(out, name):
    """{rank: value} of `name` from the helper's show: lines."""
    return {int(m[1]): m[2] for m in re.finditer(rf"rank (\d+) .*\b{name}=(\S+)", out)}


def start(jobs, argv, env=None, **kwargs):
    """`argv` as given (a command around ddplaunch), with the test's marker."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    p = subprocess.Popen([str(a) for a in argv], env=jobs.env(env), stdin=subprocess.DEVNULL,
                         text=True, **kwargs)
    jobs.procs.append(p)
    return p


@needs_netns
def test_the_two_node_line_on_one_machine_is_one_world(jobs, hosts):
    """docs/MPI.md: `ddplaunch --nnodes 2 --nproc-per-node 2 -- ./mpi_app`
    twice on one machine (node ranks automatic, port 29500)."""
    line = [BIN, "--nnodes", 2, "--nproc-per-node", 2, "--", MPI_HELLO]
    done = finish([start(jobs, hosts.command("node0", line)) for _ in range(2)])
    for rc, _, err in done:
        assert rc == 0, err
    assert one_world("".join(out for _, out, _ in done), 4), done


@needs_netns
def test_the_two_node_line_across_hosts_is_one_world(jobs, hosts):
    """docs/MPI.md: the same line on each of two hosts, with node 0's name."""
    line = [BIN, "--nnodes", 2, "--nproc-per-node", 2, "--master-addr", "node0", "--", MPI_HELLO]
    done = finish([start(jobs, hosts.command(h, line)) for h in hosts.names])
    for rc, _, err in done:
        assert rc == 0, err
    assert one_world("".join(out for _, out, _ in done), 4), done


def test_two_mpi_jobs_of_one_user_on_one_host_at_once_both_finish(jobs):
    """Without --rdzv-id: each job is its own Open MPI job (its namespace
    names a random job id), with its own shared-memory files."""
    for attempt in range(10):
        both = [jobs.start(["--nproc-per-node", 2, "--", MPI_HELLO, "barriers:300"])
                for _ in range(2)]
        for p in both:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, f"attempt {attempt}: {err}"
            assert one_world(out, 2), out


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_ranks_that_outnumber_the_cpus_are_told_to_yield(jobs):
    cpu = str(allowed_cpus()[0])
    cmd = ["taskset", "-c", cpu, BIN, "--nproc-per-node"]
    over = start(jobs, [*cmd, 2, "--", MPI_HELLO, f"show:{YIELD}"])
    fits = start(jobs, [*cmd, 1, "--", MPI_HELLO, f"show:{YIELD}"])
    mine = start(jobs, [*cmd, 2, "--", MPI_HELLO, f"show:{YIELD}"], env={YIELD: "0"})
    (rc1, out1, err1), (rc2, out2, err2), (rc3, out3, err3) = finish([over, fits, mine])
    assert (rc1, rc2, rc3) == (0, 0, 0), (err1, err2, err3)
    assert shown(out1, YIELD) == {0: "1", 1: "1"}, out1
    assert shown(out2, YIELD) == {0: "-"}, out2
    assert shown(out3, YIELD) == {0: "0", 1: "0"}, "the user's own setting wins"


@needs_netns
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_ranks_of_every_agent_on_a_host_count(jobs, hosts):
    """Two agents on one host, two ranks each, on two CPUs: four ranks."""
    cpus = ",".join(map(str, allowed_cpus()[:2]))

    def line(nproc):
        return ["taskset", "-c", cpus, BIN, "--nnodes", 2, "--nproc-per-node", nproc, "--",
                MPI_HELLO, f"show:{YIELD}"]

    for nproc, told in ((2, "1"), (1, "-")):
        done = finish([start(jobs, hosts.command("node0", line(nproc))) for _ in range(2)])
        assert [rc for rc, _, _ in done] == [0, 0], done
        assert shown("".join(out for _, out, _ in done), YIELD) == \
            {r: told for r in range(2 * nproc)}, done


class PrivateTmp:
    """A mount namespace whose /tmp and /dev/shm are empty tmpfs of its own:
    whatever a job leaves there is the job's. The real /tmp stays reachable
    at `self.real_tmp`, for a build that lives under it."""

    CACHES = {"ddplaunch-pmix-0.env", "ddplaunch-topology-0.xml"}  # kept per user, by design

    def __init__(self):
        self.real_tmp = tempfile.mkdtemp(prefix="ddplaunch-test-", dir="/run")
        self.holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount --bind /tmp "$0" && mount -t tmpfs tmp /tmp && mount -t tmpfs shm /dev/shm '
             "&& echo ready && exec sleep infinity", self.real_tmp],
            stdout=subprocess.PIPE, text=True)
        assert self.holder.stdout.readline().strip() == "ready"

    def command(self, argv):
        where = [str(a) for a in argv]
        where = [self.real_tmp + a[4:] if a.startswith("/tmp/") else a for a in where]
        return ["nsenter", "-t", self.holder.pid, "-m", "--wd=/", *where]

    def left(self):
        root = f"/proc/{self.holder.pid}/root"
        found = []
        for d in ("/tmp", "/dev/shm"):
            for name in os.listdir(root + d):
                if name not in self.CACHES:
                    found.append(f"{d}/{name}")
        return sorted(found)

    def remove(self):
        self.holder.kill()
        self.holder.wait()
        os.rmdir(self.real_tmp)


@pytest.fixture
def private_tmp():
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make a mount namespace here")
    t = PrivateTmp()
    yield t
    t.remove()


def in_barrier(stream, count):
    pids = []
    for _ in range(count):
        line = read_until(stream, "in barrier")[-1]
        pids.append(int(re.search(r"pid (\d+) in barrier", line)[1]))
    return pids


def test_open_mpis_files_go_with_every_kind_of_end(jobs, private_tmp):
    def run(args, code):
        p = start(jobs, private_tmp.command([BIN, "--nproc-per-node", 3, *args]))
        out, err = p.communicate(timeout=120)
        assert p.returncode == code, err
        assert wait_until(lambda: not private_tmp.left(), timeout=10), private_tmp.left()
        return out

    assert one_world(run(["--", MPI_HELLO, f"show:{YIELD}"], 0), 3)
    run(["--", MPI_HELLO, "abort:2:7"], 7)
    run(["--max-restarts", 1, "--", MPI_HELLO, "fail-first-round:1"], 0)

    # A rank SIGKILLed in a barrier: its 4 MiB segment outlives it.
    p = start(jobs, private_tmp.command([BIN, "--nproc-per-node", 3, "--", MPI_HELLO, "hang:2"]))
    os.kill(in_barrier(p.stdout, 2)[0], signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGKILL
    assert wait_until(lambda: not private_tmp.left(), timeout=10), private_tmp.left()

    # The launcher SIGKILLed: its guard ends the job and removes its files.
    p = start(jobs, private_tmp.command([BIN, "--nproc-per-node", 3, "--", MPI_HELLO, "hang:2"]))
    in_barrier(p.stdout, 2)
    assert private_tmp.left(), "the running job has its directory"
    p.kill()
    p.communicate(timeout=60)
    assert wait_until(lambda: not processes_with_marker(jobs.marker), timeout=10)
    assert wait_until(lambda: not private_tmp.left(), timeout=10), private_tmp.left()


def test_a_job_whose_every_process_is_sigkilled_at_once_is_cleaned_by_the_next(jobs, private_tmp):
    """A cgroup kill (Slurm's, Kubernetes'): launcher, guard and ranks at once."""
    p = start(jobs, private_tmp.command([BIN, "--nproc-per-node", 2, "--", MPI_HELLO, "hang:1"]))
    in_barrier(p.stdout, 1)
    everyone = processes_with_marker(jobs.marker)
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # none of them acts in between
        for pid in everyone:
            os.kill(pid, sig)
    p.communicate(timeout=60)
    assert wait_until(lambda: not processes_with_marker(jobs.marker), timeout=10)
    stale = private_tmp.left()
    assert any("/dev/shm/ddplaunch-job-" in f for f in stale), stale
    # The next job's guard removes it once it ends: nobody holds its lock.
    p = start(jobs, private_tmp.command([BIN, "--nproc-per-node", 2, "--", MPI_HELLO]))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert wait_until(lambda: not private_tmp.left(), timeout=10), private_tmp.left()


SETTINGS = {"OMPI_MCA_orte_base_help_aggregate": "0", "OMPI_MCA_btl_tcp_sndbuf": "131072"}


@needs_netns
def test_the_users_open_mpi_settings_reach_every_rank_on_every_node(jobs, hosts):
    names = ",".join(SETTINGS)
    line = [BIN, "--nnodes", 2, "--nproc-per-node", 2, "--", MPI_HELLO, f"show:{names}"]
    done = finish([start(jobs, hosts.command("node0", line), env=SETTINGS) for _ in range(2)])
    assert [rc for rc, _, _ in done] == [0, 0], done
    out = "".join(o for _, o, _ in done)
    for name, value in SETTINGS.items():
        assert shown(out, name) == {r: value for r in range(4)}, out


def test_mca_and_x_reach_the_ranks_without_hosts(jobs):
    r = jobs.run(["--mca", "btl_tcp_sndbuf", "65536", "-mca", "orte_base_help_aggregate", "0",
                  "-x", "DDPL_SETTING=on", "-npernode", 2, "--", MPI_HELLO,
                  "show:OMPI_MCA_btl_tcp_sndbuf,OMPI_MCA_orte_base_help_aggregate,DDPL_SETTING"])
    assert r.returncode == 0, r.stderr
    assert shown(r.stdout, "OMPI_MCA_btl_tcp_sndbuf") == {0: "65536", 1: "65536"}, r.stdout
    assert shown(r.stdout, "OMPI_MCA_orte_base_help_aggregate") == {0: "0", 1: "0"}, r.stdout
    assert shown(r.stdout, "DDPL_SETTING") == {0: "on", 1: "on"}, r.stdout
    assert one_world(r.stdout, 2), r.stdout


def test_mpiruns_variables_are_there_before_mpi_init(jobs):
    names = "OMPI_COMM_WORLD_SIZE,OMPI_COMM_WORLD_RANK,OMPI_COMM_WORLD_LOCAL_RANK,OMPI_UNIVERSE_SIZE"
    r = jobs.run(["--nproc-per-node", 3, "--", MPI_HELLO, f"show:{names}"])
    assert r.returncode == 0, r.stderr
    assert shown(r.stdout, "OMPI_COMM_WORLD_SIZE") == {r: "3" for r in range(3)}, r.stdout
    assert shown(r.stdout, "OMPI_COMM_WORLD_RANK") == {r: str(r) for r in range(3)}, r.stdout
    assert shown(r.stdout, "OMPI_UNIVERSE_SIZE") == {r: "3" for r in range(3)}, r.stdout


def _h5py_mpi():
    return subprocess.run([TORCH_PYTHON, "-c", "import h5py._debian_h5py_mpi, mpi4py"],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _h5py_mpi(), reason="python3-h5py-mpi is not installed")
def test_a_parallel_hdf5_write_with_debians_h5py(jobs, tmp_path):
    """Debian's h5py picks its MPI build only where OMPI_COMM_WORLD_SIZE is set."""
    script = tmp_path / "write.py"
    path = tmp_path / "out.h5"
    script.write_text(
        "import sys\nimport h5py\nfrom mpi4py import MPI\n"
        "c = MPI.COMM_WORLD\n"
        "with h5py.File(sys.argv[1], 'w', driver='mpio', comm=c) as f:\n"
        "    d = f.create_dataset('ranks', (c.size,), dtype='i')\n"
        "    d[c.rank] = c.rank * 10\n")
    r = jobs.run(["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--", script, path],
                 timeout=180)
    assert r.returncode == 0, r.stderr
    check = subprocess.run([TORCH_PYTHON, "-c",
                            "import sys, h5py; print(list(h5py.File(sys.argv[1])['ranks'][:]))",
                            path], capture_output=True, text=True)
    assert check.stdout.strip() == "[0, 10]", check.stderr


def test_a_native_ranks_unflushed_lines_arrive_while_it_runs(jobs):
    """C stdio on a pipe holds lines in 4 KiB blocks; a rank of a program
    linked with MPI gets a terminal for stdout, as under mpirun, so each line
    arrives as it is printed, and none is lost when the rank is killed."""
    p = jobs.start(["--nproc-per-node", 2, "--", MPI_HELLO, "ticks:0"])  # until stopped
    # Held in a block, the lines would never come (the job is killed, and
    # its ranks' buffers with it, if none came in a minute).
    watchdog = threading.Timer(60, p.kill)
    watchdog.start()
    lines = read_until(p.stdout, "[rank 0]: tick 1")
    watchdog.cancel()
    assert lines and "tick 1" in lines[-1], lines
    assert p.poll() is None
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM


def test_stdout_tty_no_keeps_the_pipe(jobs):
    r = jobs.run(["--stdout-tty", "no", "--nproc-per-node", 1, "--", "sh", "-c",
                  "test -t 1 && echo terminal || echo pipe"])
    assert r.stdout.strip() == "[rank 0]: pipe", r.stderr
    r = jobs.run(["--stdout-tty", "yes", "--nproc-per-node", 1, "--", "sh", "-c",
                  "test -t 1 && echo terminal || echo pipe; printf 'a\\nb\\n'"])
    # Raw: a "\n" stays one, no "\r" is added.
    assert r.stdout == "[rank 0]: terminal\n[rank 0]: a\n[rank 0]: b\n", repr(r.stdout)


def test_report_bindings_says_which_shared_memory_copy_the_ranks_use_and_why(jobs):
    """CMA where the launcher's probe shows it works (Open MPI's own choice,
    as under mpirun), else single-copy off, and the line says which."""
    name = "OMPI_MCA_btl_vader_single_copy_mechanism"
    r = jobs.run(["--report-bindings", "--nproc-per-node", 2, "--", MPI_HELLO, f"show:{name}"])
    assert r.returncode == 0, r.stderr
    line = re.search(r"node 0: Open MPI's shared memory uses (.*)", r.stderr)
    assert line, r.stderr
    told = shown(r.stdout, name)
    if line[1].startswith("single-copy CMA"):
        assert told == {0: "-", 1: "-"}, r.stdout
    else:
        assert line[1].startswith("no single-copy mechanism"), line[1]
        assert told == {0: "none", 1: "none"}, r.stdout
    assert one_world(r.stdout, 2), r.stdout
