"""The tree of agents that a fence among every node travels (--tree-fanout):
seven nodes of fan-out 2 (three levels) are one MPI world, on loopback and
across seven network-namespace hosts with real mpi4py; an interior host's
agent SIGKILLed mid-job is replaced by a hot spare and the next round's
MPI_Init goes through the new tree; a tree link turns away what the job's
store turns away, and a flood at it delays a child, never refuses it; two
tree jobs of one user at once; PERFORMANCE's fence-size line as written."""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess

import pytest

import netns
from conftest import (BIN, SOURCE_DIR, TORCH_PYTHON, finish, free_port, processes_with_marker,
                      read_until, wait_until)

MPI_HELLO = os.environ.get("DDPLAUNCH_MPI_HELLO")
pytestmark = pytest.mark.skipif(not MPI_HELLO, reason="the MPI helper was not built (libopenmpi-dev)")
needs_netns = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
ALLGATHER = os.path.join(SOURCE_DIR, "tests", "helpers", "mpi4py_allgather.py")
TOKEN = {"DDPLAUNCH_RDZV_TOKEN": "correct horse battery staple"}
SEVEN = ["--hosts", "a:1,b:1,c:1,d:1,e:1,f:1,g:1", "--launcher", "local"]


def results(out):
    return {int(m[1]): (int(m[2]), int(m[3]), int(m[4])) for m in
            re.finditer(r"mpi rank (\d+) size (\d+) sum (\d+) from (\d+) RANK=", out)}


def test_seven_nodes_of_fanout_two_are_one_world_through_three_levels(jobs):
    r = jobs.run([*SEVEN, "--tree-fanout", 2, "--log-level", "debug", "--", MPI_HELLO])
    assert r.returncode == 0, r.stderr
    assert results(r.stdout) == {k: (7, 21, (k + 6) % 7) for k in range(7)}, r.stdout
    # Nodes 1 and 4 each serve their two children; node 0's use the job's store.
    serving = set(re.findall(r"tree: node (\d) serves its 2 children", r.stderr))
    assert serving == {"1", "4"}, r.stderr
    links = set(re.findall(r"tree: node (\d) links to node (\d) ", r.stderr))
    assert links == {("2", "1"), ("3", "1"), ("5", "4"), ("6", "4")}, r.stderr


def test_the_default_fanout_keeps_a_small_job_on_the_store_alone(jobs):
    """Seven nodes under the default fan-out of 8: node 0's children all, no
    interior node opens a store of its own."""
    r = jobs.run([*SEVEN, "--log-level", "debug", "--", MPI_HELLO])
    assert r.returncode == 0, r.stderr
    assert len(results(r.stdout)) == 7, r.stdout
    assert "tree: node" not in r.stderr, r.stderr


def test_two_tree_jobs_of_one_user_on_one_host_at_once_stay_apart(jobs):
    """The same line twice at once, no --rdzv-id: two worlds of 7, each
    through its own three-level tree (each job's store, keys and interior
    stores its own)."""
    line = [*SEVEN, "--tree-fanout", 2, "--log-level", "debug", "--", MPI_HELLO]
    for rc, out, err in finish([jobs.start(line), jobs.start(line)]):
        assert rc == 0, err
        assert results(out) == {k: (7, 21, (k + 6) % 7) for k in range(7)}, out
        assert set(re.findall(r"tree: node (\d) serves its 2 children", err)) == {"1", "4"}, err


def test_the_documented_line_that_shows_what_a_node_brings_to_a_fence(jobs, tmp_path):
    """docs/PERFORMANCE.md's line, run as written from a checkout's root
    (build/tests/ddplaunch_mpi_hello there): one line per node and fence,
    with the bytes that node's 8 ranks put in it."""
    with open(os.path.join(SOURCE_DIR, "docs", "PERFORMANCE.md")) as f:
        doc = " ".join(f.read().split())
    line = re.search(r"`(ddplaunch --hosts a:8,b:8 [^`]*grep \"PMIx fence\")`", doc)[1]
    os.makedirs(tmp_path / "build" / "tests")
    os.symlink(MPI_HELLO, tmp_path / "build" / "tests" / "ddplaunch_mpi_hello")
    env = jobs.env({"PATH": os.path.dirname(BIN) + os.pathsep + os.environ["PATH"]})
    r = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    sizes = [int(b) for b in re.findall(r"PMIx fence among 2 node\(s\): (\d+) bytes from this node",
                                        r.stdout)]
    assert len(sizes) >= 2 and len(sizes) == len(r.stdout.splitlines()), r.stdout
    assert sum(1 for b in sizes if b > 0) >= 2, r.stdout  # both nodes' addresses, once


def test_an_interior_nodes_loss_during_a_fence_ends_every_node_naming_it(jobs):
    """Four nodes of fan-out 2, with a heartbeat timeout of 300 s: node 1 (node
    2's parent) holds its rank out of MPI_Init, so the other three wait in
    its fence; node 1's agent is SIGKILLed. Nothing waits for the heartbeat
    timeout: every node ends with exit 4, naming node 1."""
    port = free_port()
    program = ["sh", "-c", f'[ "$GROUP_RANK" = 1 ] && exec sleep 600; exec {MPI_HELLO}']
    procs = [jobs.start(["--nnodes", 4, "--node-rank", n, "--master-port", port,
                         "--tree-fanout", 2, "--heartbeat-timeout", 300, "--log-level", "debug",
                         "--", *program]) for n in range(4)]
    for n in (0, 2, 3):
        lines = read_until(procs[n].stderr, "PMIx fence among 4 node(s)")
        assert lines and "PMIx fence among 4 node(s)" in lines[-1], (n, lines)
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    for n in (0, 2, 3):
        out, err = procs[n].communicate(timeout=60)
        assert procs[n].returncode == 4, err
        assert "job failed: node 1 (" in err and "was lost" in err, err


def test_a_leafs_failure_reaches_every_node_down_the_tree(jobs, tmp_path):
    """Seven nodes of fan-out 2 (no MPI): once nodes 2, 3, 5 and 6 read the
    round's verdict on their parents' stores (and took back their read of it
    on node 0's), rank 6 fails. Node 0's store wakes nodes 0, 1 and 4; nodes
    1 and 4 hand the verdict to their children; every node stops and the
    job ends with rank 6's code, as in a job without the tree."""
    go = tmp_path / "go"
    program = f'[ "$GROUP_RANK" = 6 ] || exec sleep 600; while [ ! -e {go} ]; do sleep 0.05; done; exit 3'
    p = jobs.start([*SEVEN, "--tree-fanout", 2, "--heartbeat-timeout", 300, "--log-level", "debug",
                    "--", "sh", "-c", program])
    reading = set()
    while len(reading) < 4:
        lines = read_until(p.stderr, re.compile(r"tree: node \d reads the verdict"))
        assert lines, "the job ended first"
        reading |= set(re.findall(r"tree: node (\d) reads the verdict of round 0 on its parent", lines[-1]))
    assert reading == {"2", "3", "5", "6"}, reading
    go.touch()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert "job failed: rank 6 (node 6" in err, err
    handed = set(re.findall(r"tree: node (\d) hands the verdict of round 0 to its 2 children", err))
    assert handed == {"1", "4"}, err


def test_a_frozen_interior_node_is_lost_and_its_children_still_hear_the_verdict(jobs):
    """Seven nodes of fan-out 2, a heartbeat timeout of 3 s: node 4's agent
    (nodes 5 and 6 read the verdict on its store) is frozen with SIGSTOP.
    Node 0 finds it lost when its heartbeats stop; nodes 5 and 6, whose
    reads on node 4's store get no answer, fail their link within the
    heartbeat timeout too and read the verdict on node 0's store: every
    other node ends with exit 4 naming node 4; none waits for ever."""
    port = free_port()
    procs = [jobs.start(["--nnodes", 7, "--node-rank", n, "--master-port", port,
                         "--tree-fanout", 2, "--heartbeat-timeout", 3, "--log-level", "debug",
                         "--", "sleep", "600"]) for n in range(7)]
    for n in (5, 6):
        lines = read_until(procs[n].stderr, "reads the verdict of round 0 on its parent")
        assert lines and "on its parent" in lines[-1], (n, lines)
    procs[4].send_signal(signal.SIGSTOP)
    try:
        for n in (0, 1, 2, 3, 5, 6):
            out, err = procs[n].communicate(timeout=60)
            assert procs[n].returncode == 4, (n, err)
            assert re.search(r"job failed: node 4 \(.*\) was lost", err), (n, err)
    finally:
        procs[4].send_signal(signal.SIGKILL)
        procs[4].communicate()


def test_a_frozen_leaf_below_node_0s_children_is_found_lost_by_its_parent(jobs):
    """Seven nodes of fan-out 2, a heartbeat timeout of 3 s: nodes 5 and 6
    beat on node 4's store, not node 0's, and node 4 watches them. Node 5's
    agent is frozen with SIGSTOP: node 4 finds it lost and says so, and
    every other node ends with exit 4 naming node 5."""
    port = free_port()
    procs = [jobs.start(["--nnodes", 7, "--node-rank", n, "--master-port", port,
                         "--tree-fanout", 2, "--heartbeat-timeout", 3, "--log-level", "debug",
                         "--", "sleep", "600"]) for n in range(7)]
    lines = read_until(procs[5].stderr, "reads the verdict of round 0 on its parent")
    assert lines and "on its parent" in lines[-1], lines
    procs[5].send_signal(signal.SIGSTOP)
    try:
        for n in (0, 1, 2, 3, 4, 6):
            out, err = procs[n].communicate(timeout=60)
            assert procs[n].returncode == 4, (n, err)
            assert re.search(r"job failed: node 5 \(.*\) was lost: no heartbeat for 3 s reached "
                             r"node 4, its parent in the tree", err), (n, err)
    finally:
        procs[5].send_signal(signal.SIGKILL)
        procs[5].communicate()


def test_a_frozen_node_0_ends_every_node_down_the_tree(jobs):
    """Seven nodes of fan-out 2, a heartbeat timeout of 3 s: node 0's agent
    (the job's store) is frozen with SIGSTOP. Nodes 2, 3, 5 and 6 send node
    0 nothing while the round runs (their heartbeats go to their parents):
    node 0's children find its store silent within the heartbeat timeout
    and hand that verdict down, and every node ends with exit 4 saying it
    lost the store; none waits for ever."""
    port = free_port()
    procs = [jobs.start(["--nnodes", 7, "--node-rank", n, "--master-port", port,
                         "--tree-fanout", 2, "--heartbeat-timeout", 3, "--log-level", "debug",
                         "--", "sleep", "600"]) for n in range(7)]
    for n in (2, 3, 5, 6):
        lines = read_until(procs[n].stderr, "reads the verdict of round 0 on its parent")
        assert lines and "on its parent" in lines[-1], (n, lines)
    procs[0].send_signal(signal.SIGSTOP)
    try:
        for n in range(1, 7):
            out, err = procs[n].communicate(timeout=60)
            assert procs[n].returncode == 4, (n, err)
            assert "lost contact with the store" in err, (n, err)
    finally:
        procs[0].send_signal(signal.SIGKILL)
        procs[0].communicate()


def test_a_tree_job_whose_every_process_is_sigkilled_at_once_leaves_nothing_running(jobs):
    """Seven nodes of fan-out 2 on one host (the interior nodes' stores, the
    links to them, every worker) SIGKILLed at once, as a cgroup kill does:
    nothing of the job runs after, and the same line then runs to its end."""
    line = [*SEVEN, "--tree-fanout", 2, "--log-level", "debug", "--", "sleep", "600"]
    p = jobs.start(line)
    reading = set()
    while len(reading) < 4:
        lines = read_until(p.stderr, re.compile(r"tree: node \d reads the verdict"))
        assert lines, "the job ended first"
        reading |= set(re.findall(r"tree: node (\d) reads the verdict", lines[-1]))
    everyone = processes_with_marker(jobs.marker)
    assert len(everyone) >= 14, everyone  # seven agents, seven workers (and the guards)
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # none of them acts in between
        for pid in everyone:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    p.communicate(timeout=60)
    assert wait_until(lambda: not processes_with_marker(jobs.marker), timeout=10), \
        processes_with_marker(jobs.marker)
    r = jobs.run([*SEVEN, "--tree-fanout", 2, "--", MPI_HELLO])
    assert r.returncode == 0, r.stderr
    assert len(results(r.stdout)) == 7, r.stdout


def test_a_restarted_round_beats_up_its_own_tree(jobs):
    """Seven nodes of fan-out 2, a heartbeat timeout of 3 s, one restart:
    rank 6 fails in round 0; in round 1 every node runs for 5 s, longer
    than the timeout, with its heartbeats going up round 1's tree (new
    links to the parents' stores): no node is taken for lost, and the job
    ends 0."""
    program = ('[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && { sleep 5; exit 0; }; '
               '[ "$GROUP_RANK" = 6 ] && exit 3; exec sleep 600')
    r = jobs.run([*SEVEN, "--tree-fanout", 2, "--heartbeat-timeout", 3, "--max-restarts", 1,
                  "--log-level", "debug", "--", "sh", "-c", program], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "was lost" not in r.stderr, r.stderr
    reading = set(re.findall(r"tree: node (\d) reads the verdict of round 1 on its parent", r.stderr))
    assert reading == {"2", "3", "5", "6"}, r.stderr


def test_an_elastic_tree_job_admits_a_late_node_once_every_node_has_started(jobs):
    """An elastic 7:8 job of fan-out 2: node 0 hears its children's
    heartbeats and counts the four nodes below them as they start; once all
    have, it regroups for an eighth node that came, and round 1 runs on
    eight nodes."""
    port = free_port()
    program = ["sh", "-c", 'echo "start ws=$WORLD_SIZE group=$GROUP_RANK"; '
                           '[ "$WORLD_SIZE" != 7 ] || exec sleep 600']
    line = ["--nnodes", "7:8", "--master-port", port, "--tree-fanout", 2, "--max-restarts", 1,
            "--rdzv-last-call", 0, "--rdzv-timeout", 60, "--", *program]
    first = [jobs.start(line) for _ in range(7)]
    for p in first:
        read_until(p.stdout, "ws=7")
    late = jobs.start(line)
    outs = []
    for p in first + [late]:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "start ws=8" in out, (out, err)
        outs.append(out)
    assert "group=7" in outs[-1], "the newcomer is the last node"


def _mpi4py():
    return subprocess.run([TORCH_PYTHON, "-c", "import mpi4py"], capture_output=True).returncode == 0


def _allgather_lines(out):
    return re.findall(r"allgather rank (\d+) size (\d+) restarts (\d+) node (\d+) hosts (\S+)", out)


@needs_netns
@pytest.mark.skipif(not _mpi4py(), reason="python3-mpi4py is not installed")
def test_an_interior_hosts_agent_killed_mid_job_is_replaced_by_a_spare(jobs):
    """Eight hosts, each typing the same line: seven run an elastic job at
    its MAX of 7 with fan-out 2, the eighth waits as a hot spare. Each rank
    allgathers every host's name through the tree. The agent of the host
    that is node 1 (an interior node: nodes 2 and 3 hang from it) is
    SIGKILLed while its ranks run: the spare takes node 1's place, the next
    round's MPI_Init goes through the new tree, and every launcher left
    ends 0. Before that, rank 0 runs `ddplaunch status` and `ddplaunch
    stacks` as a user in a worker's shell would: seven ranks each."""
    h = netns.Hosts(8)
    try:
        line = [BIN, "--nnodes", "6:7", "--nproc-per-node", 1, "--master-addr", "node0",
                "--tree-fanout", 2, "--max-restarts", 1, "--", TORCH_PYTHON, ALLGATHER, "hold"]
        procs = {n: subprocess.Popen(h.command(n, line), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in h.names[:7]}
        jobs.procs.extend(procs.values())
        node_of = {}
        for name, p in procs.items():
            got = _allgather_lines("".join(read_until(p.stdout, "allgather rank")))
            assert got, (name, p.poll())
            rank, size, restarts, node, hosts = got[0]
            assert (size, restarts) == ("7", "0") and sorted(hosts.split(",")) == h.names[:7], got
            node_of[int(node)] = name
        # `ddplaunch status` and `stacks` from rank 0, as in a worker's shell.
        node0 = "".join(read_until(procs["node0"].stdout, "stacks exit"))
        assert "status ranks 7 nodes 7" in node0 and "stacks exit 0 ranks 7" in node0, node0
        spare = subprocess.Popen(h.command("node7", line), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        jobs.procs.append(spare)
        read_until(spare.stderr, "waits to be admitted as a hot spare")
        victim = procs.pop(node_of[1])
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        survivors = list(procs.values()) + [spare]
        done = finish(survivors, timeout=180)
        for rc, out, err in done:
            assert rc == 0, err
        after = [g for _, out, _ in done for g in _allgather_lines(out) if g[2] == "1"]
        assert len(after) == 7, done
        hosts = sorted(h.names[:8])
        hosts.remove(node_of[1])
        for rank, size, restarts, node, gathered in after:
            assert size == "7" and sorted(gathered.split(",")) == hosts, after
        # The spare is node 1 now, as the node it replaced.
        assert [g[3] for g in _allgather_lines(done[-1][1]) if g[2] == "1"] == ["1"], done[-1]
    finally:
        h.remove()


def _on_every_host(jobs, h, line_of, timeout, **kwargs):
    """On every host of `h` at once, the line `line_of(n)` gives the n-th:
    each launcher's (exit code, stdout, stderr), in host order."""
    procs = [subprocess.Popen(h.command(name, line_of(n)), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
             for n, name in enumerate(h.names)]
    jobs.procs.extend(procs)
    return finish(procs, timeout=timeout)


def _preflight_with_a_firewall(jobs, tmp_path, firewalled):
    """Seven hosts of fan-out 2, host `firewalled` dropping every new
    connection to its ephemeral ports (its probe port's, and an interior
    node's store for its children): each host's node rank is its number, so
    that the tree is known. Every launcher's (exit code, stdout, stderr)."""
    h = netns.Hosts(7)
    try:
        subprocess.run(["ip", "netns", "exec", h.namespaces[firewalled], "nft", "-f", "-"],
                       input="table inet ddpl {\n chain input {\n type filter hook input "
                             "priority 0; policy accept;\n tcp dport 32768-60999 ct state new "
                             "drop\n }\n}\n", text=True, check=True)
        done = _on_every_host(
            jobs, h, lambda n: [BIN, "--nnodes", 7, "--node-rank", n, "--nproc-per-node", 1,
                                "--master-addr", "node0", "--tree-fanout", 2,
                                "--preflight-timeout", 3, "--log-level", "debug", "--", "sh",
                                "-c", f"touch {tmp_path / 'started'}"], timeout=120)
    finally:
        h.remove()
    for rc, out, err in done:
        assert rc == 3, err
    assert not (tmp_path / "started").exists(), "a worker started"
    return done


needs_nft = pytest.mark.skipif(shutil.which("nft") is None, reason="needs nftables (nft)")


@needs_netns
@needs_nft
def test_a_blocked_path_below_node_0s_children_is_reported_up_the_tree(jobs, tmp_path):
    """Node 5 (a leaf below node 4) drops connections to its probe port:
    every other node's probe of it fails; the reports of nodes 2, 3 and 6
    reach node 0 through their parents, each interior node reporting for
    its subtree: every node exits 3 before any worker starts, and node 0
    names one blocked path and counts the other five, none of them a node
    that did not report."""
    done = _preflight_with_a_firewall(jobs, tmp_path, "node5")
    err0 = done[0][2]
    assert "job failed: network preflight: node 0 (node0) cannot reach node 5 (node5) at " in err0, \
        err0
    assert "(and 5 more paths: each node's log names its own)" in err0, err0
    assert "did not finish its network preflight" not in err0, err0
    assert "tree: node 1 serves its 2 children" in done[1][2], done[1][2]


@needs_netns
@needs_nft
def test_an_interior_node_its_children_cannot_reach_fails_the_preflight_on_every_node(
        jobs, tmp_path):
    """Node 4's host (an interior node: nodes 5 and 6 report through it)
    drops connections to its ephemeral ports, its store for its children
    among them: its children's reports never reach it. Node 4 names them
    once its time to gather is up, node 0 ends the job with exit 3 on every
    node, naming the blocked path first; no node gives up waiting for node
    0 before its verdict comes."""
    done = _preflight_with_a_firewall(jobs, tmp_path, "node4")
    err0 = done[0][2]
    assert "job failed: network preflight: node 0 (node0) cannot reach node 4 (node4) at " in err0, \
        err0
    assert "node 5 (node5) did not finish its network preflight" in err0 or "more path" in err0, \
        err0
    for rc, out, err in done:
        assert "did not end the network preflight in time" not in err, err


IN_MELT = "/usr/share/lammps/examples/melt/in.melt"


def _thermo(out):
    """LAMMPS's thermo table: the lines from "Step" to "Loop time" (without
    the launcher's prefix)."""
    lines = [re.sub(r"^\[[^]]*\]: ", "", l) for l in out.splitlines()]
    start = next(i for i, l in enumerate(lines) if l.split()[:1] == ["Step"])
    end = next(i for i, l in enumerate(lines) if l.startswith("Loop time"))
    return [l.split() for l in lines[start:end]]


@needs_netns
@pytest.mark.skipif(not (shutil.which("lmp") and os.path.exists(IN_MELT)),
                    reason="lammps and lammps-examples are not installed")
def test_lammps_in_melt_across_seven_hosts_through_the_tree_gives_mpiruns_results(
        jobs, tmp_path):
    """Debian's LAMMPS on its own example, one rank on each of seven hosts,
    each typing the same line with fan-out 2 (MPI_Init's fence through three
    levels): the thermo table is mpirun's, to the last digit."""
    ref = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "7", "lmp",
                          "-in", IN_MELT, "-log", "none"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    h = netns.Hosts(7)
    try:
        line = [BIN, "--nnodes", 7, "--nproc-per-node", 1, "--master-addr", "node0",
                "--tree-fanout", 2, "--", "lmp", "-in", IN_MELT, "-log", "none"]
        done = _on_every_host(jobs, h, lambda n: line, timeout=300, cwd=tmp_path)
        for rc, _, err in done:
            assert rc == 0, err
        out = done[0][1]  # node0's: rank 0 writes the table
        assert "1 by 1 by 7 MPI processor grid" in out, out
        assert _thermo(out) == _thermo(ref.stdout), (out, ref.stdout)
    finally:
        h.remove()


def _frame(body):
    return struct.pack(">I", len(body)) + body


def _hello():
    nonce = os.urandom(32)
    return _frame(b"\x00" + struct.pack(">IH", 0x44444C31, 7) + struct.pack(">I", 32) + nonce)


def _closed(sock):
    """True once the peer closed `sock` (after whatever it sent first)."""
    sock.settimeout(30)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_a_tree_link_turns_away_what_the_jobs_store_turns_away(jobs):
    """Four nodes of fan-out 2 with the job's token: node 1 serves node 2.
    Its store's port refuses a stranger's proof and says so as the job's
    store does, and closes a frame announced over the handshake's bound
    before buffering it."""
    p = jobs.start(["--hosts", "a:1,b:1,c:1,d:1", "--launcher", "local", "--tree-fanout", 2,
                    "--log-level", "debug", "--", MPI_HELLO, "hang:0"], env=TOKEN)
    lines = read_until(p.stderr, re.compile(r"tree: node 1 serves its 1 children on port \d+"))
    port = int(re.search(r"on port (\d+)", lines[-1])[1])
    # A stranger: HELLO answered with the server's proof, a wrong proof closes it.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(_hello())
    s.settimeout(30)
    head = s.recv(4)
    assert len(head) == 4, "no answer to HELLO"
    s.sendall(_frame(b"\x0b" + struct.pack(">I", 1) + struct.pack(">I", 32) + os.urandom(32)))
    assert _closed(s)
    s.close()
    # A frame announced at 2 MiB before the handshake: closed, not buffered.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack(">I", 2 * 1024 * 1024) + b"\x00" * 4096)
    assert _closed(s)
    s.close()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "refused" in err and "a client with a different job token" in err, err


@pytest.mark.skipif(not _mpi4py(), reason="python3-mpi4py is not installed")
def test_a_flood_at_a_tree_link_delays_the_child_but_never_refuses_it(jobs, tmp_path):
    """Four nodes of fan-out 2 with the job's token: node 1's store serves
    node 2. Once round 0's ranks have allgathered, 300 connections that
    never say a word are held open against node 1's port (more than its
    handshake pool and its slots), and a rank is SIGKILLed: in round 1,
    node 2 links to node 1 again through the flood, every rank allgathers
    through the tree, and every node ends 0."""
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = jobs.start(["--hosts", "a:1,b:1,c:1,d:1", "--launcher", "local", "--tree-fanout", 2,
                        "--max-restarts", 1, "--log-level", "debug", "--", TORCH_PYTHON, ALLGATHER,
                        "hold"], env=TOKEN, stdout=out, stderr=err)
    round0 = lambda: [g for g in _allgather_lines(out_path.read_text()) if g[2] == "0"]
    assert wait_until(lambda: len(round0()) == 4 or p.poll() is not None, timeout=120)
    assert len(round0()) == 4, (p.poll(), out_path.read_text(), err_path.read_text())
    port = int(re.search(r"tree: node 1 serves its 1 children on port (\d+)",
                         err_path.read_text())[1])
    links_before = err_path.read_text().count("tree: node 2 links to node 1 ")
    flood = []
    try:
        for _ in range(300):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            flood.append(s)
        workers = [pid for pid in processes_with_marker(jobs.marker) if _is_worker(pid)]
        assert len(workers) == 4, workers
        os.kill(workers[0], signal.SIGKILL)
        assert p.wait(timeout=120) == 0, err_path.read_text()
    finally:
        for s in flood:
            s.close()
    after = [g for g in _allgather_lines(out_path.read_text()) if g[2] == "1"]
    assert sorted(g[0] for g in after) == ["0", "1", "2", "3"], out_path.read_text()
    err = err_path.read_text()
    assert err.count("tree: node 2 links to node 1 ") == links_before + 1, err
    # Node 1's store made room by closing the flood's oldest, and said so.
    assert re.search(r"the store closed \d+ connection\(s\) that had not finished the "
                     r"handshake to make room for newer ones \(more than 64 at once", err), err


def _is_worker(pid):
    """A rank (the helper under Python), not an agent."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[:2] == [TORCH_PYTHON.encode(), ALLGATHER.encode()]
    except OSError:
        return False
