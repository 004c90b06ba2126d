"""MPI programs as workers: each agent hosts a PMIx server (Debian's
libpmix), so a real Open MPI program's MPI_Init joins one MPI_COMM_WORLD
whose ranks are ddplaunch's RANKs, on one node and across nodes (fences
through the store), and MPI_Abort, a rank that skips MPI_Finalize and a rank
killed in a barrier each end the job everywhere with one verdict."""
import os
import re
import signal
import socket
import subprocess

import pytest

from conftest import SOURCE_DIR, TORCH_PYTHON, wait_until

MPI_HELLO = os.environ.get("DDPLAUNCH_MPI_HELLO")
pytestmark = pytest.mark.skipif(not MPI_HELLO, reason="the MPI helper was not built (libopenmpi-dev)")
LOCAL2x2 = ["--hosts", "a:2,b:2", "--launcher", "local", "--rdzv-timeout", 60]


def results(out):
    """{rank: (size, sum, from, RANK)} from the helper's result lines."""
    found = {}
    for m in re.finditer(r"mpi rank (\d+) size (\d+) sum (\d+) from (\d+) RANK=(\S+)", out):
        found[int(m[1])] = (int(m[2]), int(m[3]), int(m[4]), m[5])
    return found


def one_world(out, n):
    return results(out) == {r: (n, n * (n - 1) // 2, (r + n - 1) % n, str(r)) for r in range(n)}


def test_one_node_of_four_ranks_is_one_world(jobs):
    r = jobs.run(["--nproc-per-node", 4, "--", MPI_HELLO])
    assert r.returncode == 0, r.stderr
    assert one_world(r.stdout, 4), r.stdout


def test_two_nodes_on_loopback_are_one_world_in_rank_order(jobs):
    r = jobs.run([*LOCAL2x2, "--", MPI_HELLO, "hosts"])
    assert r.returncode == 0, r.stderr
    # MPI's rank is ddplaunch's RANK, and the allreduce and the ring cross the nodes.
    assert one_world(r.stdout, 4), r.stdout
    # Both nodes' servers describe the job alike: every rank sees the same
    # host for each rank (this machine's name, told apart per node), not a
    # placeholder on the node that does not host the store.
    views = {m[1]: m[2].split() for m in re.finditer(r"rank (\d) sees hosts (.*)", r.stdout)}
    assert len(views) == 4 and all(v == views["0"] for v in views.values()), r.stdout
    host = socket.gethostname()
    assert [h.split(".n")[0] for h in views["0"]] == [host] * 4, r.stdout
    assert views["0"][0] == views["0"][1] != views["0"][2] == views["0"][3], r.stdout


def test_mpi_abort_ends_every_node_with_its_code_and_names_it(jobs):
    r = jobs.run([*LOCAL2x2, "--", MPI_HELLO, "abort:2:7"])
    assert r.returncode == 7, r.stderr
    assert "job failed: rank 2 (node 1" in r.stderr, r.stderr
    assert "rank 2 raised MPI_Abort with error code 7" in r.stderr, r.stderr
    assert results(r.stdout) == {}


def test_a_rank_that_skips_mpi_finalize_fails_the_job(jobs, tmp_path):
    summary = tmp_path / "summary.json"
    r = jobs.run([*LOCAL2x2, "--summary-json", summary, "--", MPI_HELLO, "nofinalize:1"])
    assert r.returncode == 1, r.stderr
    assert "job failed: rank 1 (node 0" in r.stderr, r.stderr
    assert "without calling MPI_Finalize" in r.stderr, r.stderr


def test_a_rank_killed_in_a_barrier_ends_the_job_everywhere(jobs, tmp_path):
    logs = tmp_path / "logs"
    p = jobs.start([*LOCAL2x2, "--log-dir", logs, "--", MPI_HELLO, "hang:3"])

    def pid_of(rank, what):
        path = logs / str(rank) / "stdout.log"
        m = re.search(r"pid (\d+) " + what, path.read_text()) if path.exists() else None
        return int(m[1]) if m else None

    assert wait_until(lambda: all(pid_of(r, "in barrier") for r in range(3)), timeout=60)
    os.kill(pid_of(1, "in barrier"), signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGKILL, err
    assert "job failed: rank 1 (node 0" in err and "SIGKILL" in err, err
    # The jobs fixture fails the test if any rank is left.


def test_a_restarted_round_initialises_mpi_again(jobs):
    r = jobs.run([*LOCAL2x2, "--max-restarts", 1, "--", MPI_HELLO, "fail-first-round:3"])
    assert r.returncode == 0, r.stderr
    assert "restarting every worker (restart 1 of 1)" in r.stderr, r.stderr
    assert one_world(r.stdout, 4), r.stdout


def test_no_pmix_leaves_each_rank_a_singleton(jobs):
    r = jobs.run(["--no-pmix", "--nproc-per-node", 2, "--", MPI_HELLO])
    assert r.returncode == 0, r.stderr
    assert {k: v[0] for k, v in results(r.stdout).items()} == {0: 1}, r.stdout
    assert r.stdout.count("size 1 ") == 2, r.stdout


def _mpi4py():
    return subprocess.run([TORCH_PYTHON, "-c", "import mpi4py"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _mpi4py(), reason="python3-mpi4py is not installed")
def test_mpi4py_allreduce_and_bcast_across_two_nodes(jobs):
    script = os.path.join(SOURCE_DIR, "tests", "helpers", "mpi4py_job.py")
    r = jobs.run([*LOCAL2x2, "--python", TORCH_PYTHON, "--", script], timeout=180)
    assert r.returncode == 0, r.stderr
    lines = sorted(l.split("]: ", 1)[-1] for l in r.stdout.splitlines() if "mpi4py rank" in l)
    assert lines == [f"mpi4py rank {i} size 4 sum 6 word hello-from-0 RANK={i}"
                     for i in range(4)], r.stdout


def test_direct_modex_serves_a_peers_data_without_a_fence(jobs):
    """Open MPI's asynchronous modex skips MPI_Init's data fence: each peer's
    data is fetched from the node that hosts it (PMIx direct modex)."""
    r = jobs.run([*LOCAL2x2, "--", MPI_HELLO],
                 env={"OMPI_MCA_pmix_base_async_modex": "1",
                      "OMPI_MCA_pmix_base_collect_data": "0"})
    assert r.returncode == 0, r.stderr
    assert one_world(r.stdout, 4), r.stdout


def topology_lines(out):
    return sorted(re.findall(r"rank \d+ (topology .*)", out))


def test_a_fence_with_a_required_directive_the_server_does_not_know_is_refused(jobs):
    # PMIx's rule for PMIX_INFO_REQD: a server that cannot honour a required
    # directive refuses the call rather than ignore it; on a fence across
    # both nodes, each rank's PMIx_Fence returns the refusal, and MPI goes on.
    r = jobs.run([*LOCAL2x2, "--", MPI_HELLO, "required"])
    assert r.returncode == 0, r.stderr
    said = dict(re.findall(r"rank (\d) required fence: (\S+)", r.stdout))
    if set(said.values()) == {"built"}:
        pytest.skip("the MPI helper was built without libpmix")
    assert said == {str(k): "NOT-SUPPORTED" for k in range(4)}, r.stdout  # PMIX_ERR_NOT_SUPPORTED
    assert one_world(r.stdout, 4), r.stdout


def test_the_machine_topology_is_cached_and_shared_to_the_byte(jobs, tmp_path):
    """The PMIx server's topology is discovered once, cached for this user,
    and read back at the next launch: the ranks get the same XML (what
    Open MPI places them by) either way; a stale, damaged or foreign cache
    is discovered again and replaced."""
    env = {"TMPDIR": str(tmp_path)}
    cache = tmp_path / f"ddplaunch-topology-{os.geteuid()}.xml"
    args = ["--log-level", "debug", "--nproc-per-node", 2, "--", MPI_HELLO, "topology"]

    first = jobs.run(args, env=env)
    assert first.returncode == 0, first.stderr
    assert "topology: discovered, now cached" in first.stderr, first.stderr
    shared = topology_lines(first.stdout)
    assert len(shared) == 2 and len(set(shared)) == 1 and "machine=yes" in shared[0], first.stdout
    assert cache.read_text().startswith("ddplaunch-topology 1 hwloc="), cache.read_text()[:200]
    assert cache.stat().st_mode & 0o777 == 0o600

    again = jobs.run(args, env=env)
    assert again.returncode == 0, again.stderr
    assert f"topology: read from {cache}" in again.stderr, again.stderr
    assert topology_lines(again.stdout) == shared, again.stdout

    header, xml = cache.read_text().split("\n", 1)
    for damage in [header.replace("boot=", "boot=other-") + "\n" + xml,  # another boot's
                   "<?xml version=\"1.0\"?>\n"]:  # not ours at all
        cache.write_text(damage)
        r = jobs.run(args, env=env)
        assert r.returncode == 0, r.stderr
        assert "topology: discovered, now cached" in r.stderr, r.stderr
        assert topology_lines(r.stdout) == shared, r.stdout
        assert cache.read_text() == header + "\n" + xml

    # The right key but an XML hwloc cannot read: discovered, and the file
    # removed, so that the next launch caches a full discovery again.
    cache.write_text(header + "\n<topology version=\"2.0\"><object type=\"Bogus\"")
    r = jobs.run(args, env=env)
    assert r.returncode == 0, r.stderr
    assert "topology: discovered (a damaged cache was removed)" in r.stderr, r.stderr
    assert topology_lines(r.stdout) == shared, r.stdout
    assert not cache.exists()
    r = jobs.run(args, env=env)
    assert "topology: discovered, now cached" in r.stderr, r.stderr
    assert cache.read_text() == header + "\n" + xml

    cache.chmod(0o666)  # others could have written it: not trusted
    r = jobs.run(args, env=env)
    assert "topology: discovered, now cached" in r.stderr, r.stderr
    assert cache.stat().st_mode & 0o777 == 0o600


def test_a_user_steering_hwloc_gets_no_cache(jobs, tmp_path):
    r = jobs.run(["--log-level", "debug", "--nproc-per-node", 2, "--", MPI_HELLO, "topology"],
                 env={"TMPDIR": str(tmp_path), "HWLOC_COMPONENTS": "-opencl"})
    assert r.returncode == 0, r.stderr
    assert len(set(topology_lines(r.stdout))) == 1 and "machine=yes" in r.stdout, r.stdout
    assert not list(tmp_path.glob("ddplaunch-topology-*")), "no cache is written"
    r = jobs.run(["--nproc-per-node", 1, "--", MPI_HELLO],
                 env={"TMPDIR": str(tmp_path), "DDPLAUNCH_TOPOLOGY_CACHE": "0"})
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob("ddplaunch-topology-*")), "no cache is written"


def launcher_maps_libpmix(jobs, env):
    """How many of the launcher's mappings are libpmix's, as its worker sees them."""
    r = jobs.run(["--nproc-per-node", 1, "--", "/bin/sh", "-c",
                  "grep -c libpmix /proc/$PPID/maps || true"], env=env)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[-1])


def test_the_pmix_server_starts_only_once_a_worker_connects(jobs, tmp_path):
    """The first launch starts its PMIx server before its workers and keeps
    the environment the server gives them (this user's file, 0600). Later
    launches start their workers at once, pointing them at a relay, and
    start libpmix only when a worker connects: a job that never calls
    MPI_Init never loads it, and an MPI job still forms one world, restarts
    included. DDPLAUNCH_PMIX_LAZY=0 starts the server first again."""
    env = {"TMPDIR": str(tmp_path)}
    kept = tmp_path / f"ddplaunch-pmix-{os.geteuid()}.env"
    assert launcher_maps_libpmix(jobs, env) > 0  # nothing kept yet: started first
    assert kept.stat().st_mode & 0o777 == 0o600
    assert "PMIX_SERVER_URI4=@@URI@@" in kept.read_text(), kept.read_text()

    assert launcher_maps_libpmix(jobs, env) == 0
    r = jobs.run(["--log-level", "debug", "--nproc-per-node", 4, "--", MPI_HELLO], env=env)
    assert r.returncode == 0, r.stderr
    assert one_world(r.stdout, 4), r.stdout
    assert "the PMIx server started for the first worker that connected" in r.stderr, r.stderr

    r = jobs.run([*LOCAL2x2, "--max-restarts", 1, "--", MPI_HELLO, "fail-first-round:3"], env=env)
    assert r.returncode == 0, r.stderr
    assert "restarting every worker (restart 1 of 1)" in r.stderr, r.stderr
    assert one_world(r.stdout, 4), r.stdout

    r = jobs.run([*LOCAL2x2, "--", MPI_HELLO, "abort:2:7"], env=env)
    assert r.returncode == 7, r.stderr
    assert "rank 2 raised MPI_Abort with error code 7" in r.stderr, r.stderr

    assert launcher_maps_libpmix(jobs, {**env, "DDPLAUNCH_PMIX_LAZY": "0"}) > 0


def test_a_kept_pmix_environment_that_no_longer_fits_is_replaced(jobs, tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    kept = tmp_path / f"ddplaunch-pmix-{os.geteuid()}.env"
    r = jobs.run(["--nproc-per-node", 1, "--", MPI_HELLO], env=env)
    assert r.returncode == 0, r.stderr
    good = kept.read_text()
    kept.write_text(good + "PMIX_LEFT_OVER=1\n")
    r = jobs.run(["--nproc-per-node", 2, "--", MPI_HELLO], env=env)
    assert r.returncode == 0, r.stderr
    assert "the PMIx server's environment changed since it was kept" in r.stderr, r.stderr
    assert kept.read_text() == good
    # Other PMIx settings are another key: learnt with the server started first.
    r = jobs.run(["--nproc-per-node", 2, "--", MPI_HELLO],
                 env={**env, "PMIX_MCA_pmix_server_verbose": "0"})
    assert r.returncode == 0, r.stderr
    assert one_world(r.stdout, 2), r.stdout
    assert "PMIX_MCA_pmix_server_verbose=0" in kept.read_text().splitlines()[0]
