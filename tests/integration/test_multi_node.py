"""Several agents on loopback forming one job: rendezvous, one verdict, one teardown."""
import json
import os
import random
import re
import signal
import socket

import pytest

from conftest import (SOURCE_DIR, TORCH_PYTHON, env_lines, finish, free_port, needs_torch, read_until,
                      wait_until, worker)

FAST = ["--heartbeat-interval", "0.2", "--heartbeat-timeout", "2", "--term-timeout", "5"]


def agent_args(port, nnodes, nproc=2, node_rank=None, extra=(), rdzv_timeout=30):
    args = ["--nnodes", nnodes, "--nproc-per-node", nproc, "--master-port", port,
            "--rdzv-timeout", rdzv_timeout, *FAST]
    if node_rank is not None:
        args += ["--node-rank", node_rank]
    return args + list(extra)


def start_agents(jobs, port, nnodes, steps, nprocs=None, explicit=False, order=None, extra=()):
    order = order or list(range(nnodes))
    procs = {}
    for n in order:
        nproc = nprocs[n] if nprocs else 2
        procs[n] = jobs.start(agent_args(port, nnodes, nproc, n if explicit else None, extra) + ["--", *worker(*steps)])
    return [procs[n] for n in range(nnodes)]


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("explicit", [True, False])
def test_one_rank_space_across_nodes(jobs, explicit):
    port = free_port()
    order = [2, 1, 0] if explicit else None  # the store host starts last
    results = finish(start_agents(jobs, port, 3, ["env"], explicit=explicit, order=order))
    all_envs = {}
    for rc, out, err in results:
        assert rc == 0, err
        all_envs.update(env_lines(out))
    assert sorted(all_envs) == list(range(6))
    assert {e["WORLD_SIZE"] for e in all_envs.values()} == {"6"}
    assert len({e["MASTER_PORT"] for e in all_envs.values()}) == 1
    assert {e["MASTER_ADDR"] for e in all_envs.values()} == {"127.0.0.1"}
    for rank, e in all_envs.items():
        assert int(e["NODE_RANK"]) == rank // 2 and int(e["LOCAL_RANK"]) == rank % 2
        assert e["GROUP_WORLD_SIZE"] == "3"
    if explicit:
        for n, (rc, out, err) in enumerate(results):
            assert {int(e["NODE_RANK"]) for e in env_lines(out).values()} == {n}


def test_heterogeneous_workers_per_node(jobs):
    port = free_port()
    results = finish(start_agents(jobs, port, 3, ["env"], nprocs=[1, 3, 2], explicit=True))
    ranks = {}
    for n, (rc, out, err) in enumerate(results):
        assert rc == 0, err
        ranks[n] = sorted(env_lines(out))
        assert {e["WORLD_SIZE"] for e in env_lines(out).values()} == {"6"}
    assert ranks == {0: [0], 1: [1, 2, 3], 2: [4, 5]}


def test_random_start_order_with_automatic_ranks(jobs):
    port = free_port()
    order = list(range(4))
    random.shuffle(order)
    results = finish(start_agents(jobs, port, 4, ["env"], order=order))
    seen = set()
    for rc, out, err in results:
        assert rc == 0, err
        seen |= set(env_lines(out))
    assert seen == set(range(8))


@pytest.mark.parametrize("nnodes,extra,fragment", [
    (3, [], "has --nnodes 3 but node 0 has --nnodes 2"),
    (2, ["--rdzv-id", "other"], "has --rdzv-id other but node 0 has none"),
])
def test_disagreement_ends_rendezvous_on_every_node(jobs, nnodes, extra, fragment):
    port = free_port()
    good = jobs.start(agent_args(port, 2, node_rank=0) + ["--", *worker("sleep=60")])
    args = agent_args(port, nnodes, node_rank=1, extra=extra) + ["--", *worker("sleep=60")]
    other = jobs.start(args)
    for rc, out, err in finish([good, other]):
        assert rc == 3, err
        assert fragment in err, err
        assert len([l for l in err.splitlines() if "error" in l]) == 1


def test_an_unrelated_job_on_the_same_port_is_refused_alone(jobs):
    """A stray launch of another program on a waiting job's port is refused
    (exit 3); the waiting job is untouched and runs once its own node comes."""
    port = free_port()
    mine = jobs.start(agent_args(port, 2) + ["--", *worker("out=mine")])
    assert wait_until(lambda: listening(port)), "node 0 never hosted the store"
    theirs = jobs.run(agent_args(port, 2) + ["--", *worker("out=theirs")])
    assert theirs.returncode == 3, theirs.stderr
    assert "runs '" in theirs.stderr and "out=theirs" in theirs.stderr, theirs.stderr
    assert "give unrelated jobs their own" in theirs.stderr, theirs.stderr
    assert "[rank" not in theirs.stdout
    assert mine.poll() is None, "the waiting job must not end because a stranger came"
    node1 = jobs.start(agent_args(port, 2) + ["--", *worker("out=mine")])
    for rc, out, err in finish([mine, node1]):
        assert rc == 0, err
        assert "mine" in out and "theirs" not in out, out


def test_the_same_words_split_otherwise_are_another_command(jobs):
    """Commands are compared word by word: `sh -c S sh "a b"` on node 0 and
    `sh -c S sh a b` on node 1 are not one job, though they read alike joined."""
    port = free_port()
    script = 'echo "$#"'
    mine = jobs.start(agent_args(port, 2) + ["--", "sh", "-c", script, "sh", "a b"])
    assert wait_until(lambda: listening(port)), "node 0 never hosted the store"
    theirs = jobs.run(agent_args(port, 2) + ["--", "sh", "-c", script, "sh", "a", "b"])
    assert theirs.returncode == 3, theirs.stderr
    assert 'runs \'sh -c "echo \\"\\$#\\"" sh a b\' but node 0 runs' in theirs.stderr, theirs.stderr
    assert '"a b"' in theirs.stderr, theirs.stderr
    node1 = jobs.start(agent_args(port, 2) + ["--", "sh", "-c", script, "sh", "a b"])
    for rc, out, err in finish([mine, node1]):
        assert rc == 0, err
        assert out.splitlines() and all(l.endswith(": 1") for l in out.splitlines()), out


@pytest.mark.parametrize("attempt", range(3))
def test_more_agents_than_nodes_at_once_form_one_job_and_refuse_the_rest(jobs, attempt, tmp_path):
    """Four agents of a 2-node job start at the same moment with automatic
    ranks: whichever hosts the store, two form the job and two are refused.
    The job holds until two agents have ended (the refused ones), so a slow
    agent cannot start a second job on the port once the first is over."""
    port = free_port()
    addrs = ["127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2"]
    go = tmp_path / "go"
    procs = [jobs.start(["--nnodes", 2, "--master-addr", "127.0.0.1", "--master-port", port,
                         "--local-addr", a, "--rdzv-timeout", 30, *FAST, "--",
                         *worker("env", f"waitfile={go}")])
             for a in addrs]
    assert wait_until(lambda: sum(p.poll() is not None for p in procs) >= 2, timeout=120)
    go.write_text("")
    results = finish(procs)
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0, 0, 3, 3], [(rc, err) for rc, _, err in results]
    ranks = {}
    for rc, out, err in results:
        assert "internal error" not in err, err
        if rc == 3:
            assert "more agents joined than --nnodes 2" in err, err
            assert "[rank" not in out
        else:
            ranks.update(env_lines(out))
    assert sorted(ranks) == [0, 1]


def test_duplicate_node_rank_names_both_nodes_by_their_address(jobs):
    port = free_port()
    a = jobs.start(agent_args(port, 3, node_rank=0) + ["--", *worker()])
    b = jobs.start(agent_args(port, 3, node_rank=1, extra=["--local-addr", "127.0.0.2"]) + ["--", *worker()])
    c = jobs.start(agent_args(port, 3, node_rank=1, extra=["--local-addr", "127.0.0.3"]) + ["--", *worker()])
    for rc, out, err in finish([a, b, c]):
        assert rc == 3
        assert "node rank 1 is claimed twice" in err, err
        assert "127.0.0.2" in err and "127.0.0.3" in err, err


def test_eight_agents_master_last_with_distinct_node_addresses(jobs):
    port = free_port()
    order = list(range(1, 8))
    random.shuffle(order)
    procs = {}
    for n in order + [0]:  # the store host starts last: the others retry until it is up
        procs[n] = jobs.start(agent_args(port, 8, 1, n, extra=["--local-addr", f"127.0.0.{n + 1}"])
                              + ["--", *worker("env")])
    ranks = {}
    for n, (rc, out, err) in enumerate(finish([procs[n] for n in range(8)])):
        assert rc == 0, err
        envs = env_lines(out)
        assert list(envs) == [n]
        ranks.update(envs)
    assert {e["WORLD_SIZE"] for e in ranks.values()} == {"8"}
    assert len({e["MASTER_PORT"] for e in ranks.values()}) == 1


def test_rendezvous_timeout_names_the_missing_node(jobs):
    port = free_port()
    a = jobs.start(agent_args(port, 3, node_rank=0, rdzv_timeout=1) + ["--", *worker()])
    b = jobs.start(agent_args(port, 3, node_rank=1, rdzv_timeout=1) + ["--", *worker()])
    for rc, out, err in finish([a, b]):
        assert rc == 3, err
        assert "rendezvous timed out after 1 s: 2/3 joined (missing: node 2)" in err, err


def test_rendezvous_timeout_with_automatic_ranks_counts_the_missing(jobs):
    port = free_port()
    a = jobs.start(agent_args(port, 3, rdzv_timeout=1) + ["--", *worker()])
    b = jobs.start(agent_args(port, 3, rdzv_timeout=1) + ["--", *worker()])
    for rc, out, err in finish([a, b]):
        assert rc == 3, err
        assert "rendezvous timed out after 1 s: 2/3 joined (missing: 1 node)" in err, err


def test_failure_on_a_non_master_node_ends_the_job_everywhere(jobs):
    port = free_port()
    procs = start_agents(jobs, port, 3, ["@3:err=rank three failed", "@3:exit=7", "sleep=300"], explicit=True)
    results = finish(procs)
    for rc, out, err in results:
        assert rc == 7, err
        assert "job failed: rank 3 (node 1, local rank 1" in err
        assert "  | rank three failed" in err
    node0_err = results[0][2]
    for rank in (0, 1, 2, 4, 5):
        assert f"ddplaunch:   rank {rank} (node {rank // 2}" in node0_err, node0_err


def test_ranks_failing_alike_are_folded_into_one_line_after_the_root_cause(jobs, tmp_path):
    """Every rank of 2 nodes × 3 prints the same error and exits 1 (each
    ignores SIGTERM, so the ones ddplaunch stops still exit with their own
    code): the report names the root cause with its lines, then the others
    as ranks lists, and the error's lines once."""
    port = free_port()
    script = (f'touch {tmp_path}/r.$RANK; trap "" TERM; '
              f'while [ $(ls {tmp_path} | wc -l) -lt 6 ]; do sleep 0.01; done; '
              'echo "NCCL WARN Net : Connection closed by remote peer" >&2; '
              'echo "RuntimeError: NCCL error: remote process exited" >&2; exit 1')
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 3, "--master-port", port,
                         "--", "sh", "-c", script]) for _ in range(2)]
    results = finish(procs)
    for rc, out, err in results:
        assert rc == 1, err
    def named(report):
        ranks = set()
        for m in re.finditer(r"^ddplaunch:   ranks? ([0-9,-]+) \(", report, re.M):
            for part in m.group(1).split(","):
                a, _, b = part.partition("-")
                ranks.update(range(int(a), int(b or a) + 1))
        return ranks
    # Node ranks are automatic: node 0's report is the one that lists every rank.
    reports = [err[err.index("ddplaunch: job failed: rank"):] for _, _, err in results]
    report = max(reports, key=lambda r: len(named(r)))
    assert report.count("Connection closed by remote peer") == 1, report
    root = int(re.search(r"job failed: rank (\d+)", report).group(1))
    assert named(report) | {root} == set(range(6)) and root not in named(report), report
    assert re.search(r"^ddplaunch:   ranks [0-9,-]+ \(nodes 0-1\): exited with exit code 1", report, re.M) \
        or "last lines: the same as rank" in report, report


def ready(tmp_path, n):
    return lambda: len([p for p in os.listdir(tmp_path) if p.startswith("ready.")]) >= n


def test_killed_agent_takes_its_workers_and_the_job_ends(jobs, tmp_path):
    # The heartbeat timeout (300 s) is far beyond the test's waits: the
    # store itself says node 2 is lost when its agent's connection closes.
    port = free_port()
    procs = start_agents(jobs, port, 3, [f"ready={tmp_path}", "sleep=300"], explicit=True,
                         extra=["--heartbeat-timeout", 300])
    assert wait_until(ready(tmp_path, 6), timeout=60)
    procs[2].kill()
    procs[2].wait()
    for rc, out, err in finish(procs[:2], timeout=60):
        assert rc == 4, err
        assert "node 2 (" in err and "was lost: its agent's connection to the store closed" in err, err
        assert "not every node reported" not in err, "node 0 does not wait for the lost node's results"


def test_killed_master_ends_the_job_everywhere(jobs, tmp_path):
    port = free_port()
    procs = start_agents(jobs, port, 3, [f"ready={tmp_path}", "sleep=300"], explicit=True)
    assert wait_until(ready(tmp_path, 6), timeout=60)
    procs[0].kill()
    procs[0].wait()
    for rc, out, err in finish(procs[1:]):
        assert rc == 4, err
        assert "lost contact with the store" in err


def test_members_whose_node_0_was_started_again_join_its_new_store(jobs):
    """Two members of a 4-node job had stored their join records when node
    0's agent was SIGKILLed (before every node was there, so before node 0
    could answer anyone); it is started again on the same port. Each member,
    joining again, finds its arrival gone from the new store and takes a
    new one: with the fourth node the job runs on all four (before, every
    node waited out --rdzv-timeout with "3/4 joined")."""
    port = free_port()
    args = ["--nnodes", 4, "--nproc-per-node", 1, "--master-port", port, "--rdzv-timeout", 60]
    node0 = jobs.start([*args, "--", "true"])

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    assert wait_until(listening, timeout=60)
    members = [jobs.start([*args, "--log-level", "debug", "--", "true"]) for _ in range(2)]
    for m in members:
        said = read_until(m.stderr, "joined as arrival")
        assert said and "joined as arrival" in said[-1], "".join(said)
    node0.kill()
    node0.wait()
    again = jobs.start([*args, "--", "true"])
    last = jobs.start([*args, "--", "true"])
    for rc, out, err in finish([again, *members, last], timeout=120):
        assert rc == 0, err


def test_stopped_agent_is_lost_by_heartbeat(jobs, tmp_path):
    port = free_port()
    procs = start_agents(jobs, port, 2, [f"ready={tmp_path}", "sleep=300"], explicit=True)
    assert wait_until(ready(tmp_path, 4), timeout=60)
    procs[1].send_signal(signal.SIGSTOP)
    rc, out, err = finish([procs[0]])[0]
    assert rc == 4 and "node 1 (" in err and "was lost" in err, err
    procs[1].send_signal(signal.SIGCONT)  # on waking it learns the verdict and stops too
    rc, out, err = finish([procs[1]])[0]
    assert rc == 4, err


def test_interrupt_on_one_agent_ends_the_job_everywhere(jobs, tmp_path):
    port = free_port()
    procs = start_agents(jobs, port, 3, [f"ready={tmp_path}", "sleep=300"], explicit=True)
    assert wait_until(ready(tmp_path, 6), timeout=60)
    procs[1].send_signal(signal.SIGINT)
    for rc, out, err in finish(procs):
        assert rc == 130, err
        assert ("node 1 (" in err and "received SIGINT" in err) or "ddplaunch received SIGINT" in err


def test_success_waits_for_the_slowest_node(jobs):
    port = free_port()
    procs = start_agents(jobs, port, 2, ["@3:sleep=1", "out=done"], explicit=True)
    results = finish(procs)
    for rc, out, err in results:
        assert rc == 0, err
    assert "[rank 3]: done" in results[1][1]



@needs_torch
@pytest.mark.parametrize("nprocs", [[2, 2], [1, 2, 3]])
def test_pytorch_gloo_across_nodes(jobs, nprocs):
    port = free_port()
    world = sum(nprocs)
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    procs = [jobs.start(agent_args(port, len(nprocs), nproc, n) + ["--python", TORCH_PYTHON, "--", example, "2"])
             for n, nproc in enumerate(nprocs)]
    lines = []
    for rc, out, err in finish(procs, timeout=300):
        assert rc == 0, err
        lines += [l for l in out.splitlines() if "replicas" in l]
    assert len(lines) == world
    total = world * (world + 1) // 2
    assert all(f"/{world}: all-reduce {total}," in l and l.endswith("replicas agree") for l in lines), lines


def test_every_node_learns_the_jobs_shape_and_node_0_every_node(jobs, tmp_path):
    """What the other nodes read at rendezvous does not grow with the job:
    the node sizes and their own rank. So node 0's summary lists every node,
    another node's summary its own (both have the world and the sizes)."""
    port = free_port()
    procs = []
    for n, nproc in enumerate([1, 3]):
        procs.append(jobs.start(agent_args(port, 2, nproc, n, extra=[
            "--local-addr", f"127.0.0.{n + 1}", "--summary-json", tmp_path / f"s{n}.json"])
            + ["--", *worker()]))
    for rc, out, err in finish(procs):
        assert rc == 0, err
    docs = [json.loads((tmp_path / f"s{n}.json").read_text()) for n in range(2)]
    for doc in docs:
        topo = doc["topology"]
        assert topo["world_size"] == 4 and topo["nnodes"] == 2 and topo["master_addr"] == "127.0.0.1"
        assert topo["sizes"] == [[1, 1], [3, 1]]
    nodes = [[(n["node_rank"], n["addr"], n["nproc"], n["first_rank"]) for n in doc["topology"]["nodes"]]
             for doc in docs]
    assert nodes == [[(0, "127.0.0.1", 1, 0), (1, "127.0.0.2", 3, 1)], [(1, "127.0.0.2", 3, 1)]]
    assert [w["rank"] for w in docs[1]["topology"]["nodes"][0]["workers"]] == [1, 2, 3]
    assert [r["rank"] for r in docs[0]["ranks"]] == [0, 1, 2, 3], "node 0 lists every rank"
    assert [r["rank"] for r in docs[1]["ranks"]] == [1, 2, 3]


def test_tf_config_is_one_cluster_with_a_port_for_every_worker(jobs):
    port = free_port()
    procs = [jobs.start(agent_args(port, 2, nproc, n, extra=["--env-style", "tf",
                                                             "--local-addr", f"127.0.0.{n + 1}"])
                        + ["--", *worker("env")])
             for n, nproc in enumerate([2, 1])]
    envs = {}
    for rc, out, err in finish(procs):
        assert rc == 0, err
        envs.update(env_lines(out))
    configs = {rank: json.loads(e["TF_CONFIG"]) for rank, e in envs.items()}
    clusters = {json.dumps(c["cluster"], sort_keys=True) for c in configs.values()}
    assert len(clusters) == 1, "every worker sees the same cluster"
    workers = next(iter(configs.values()))["cluster"]["worker"]
    assert list(configs[0]["cluster"]) == ["worker"] and len(workers) == 3
    assert len(set(workers)) == 3, "each worker has its own port"
    assert [w.split(":")[0] for w in workers] == ["127.0.0.1", "127.0.0.1", "127.0.0.2"]
    for rank, c in configs.items():
        assert c["task"] == {"type": "worker", "index": rank}


def test_agents_on_loopback_addresses_all_name_lo_for_gloo(jobs):
    """Two agents on one host, one with --local-addr 127.0.0.1, the other
    127.0.0.2: both are on lo, and every worker gets GLOO_SOCKET_IFNAME and
    NCCL_SOCKET_IFNAME=lo (node 1's used to get none)."""
    port = free_port()
    procs = [jobs.start(agent_args(port, 2, nproc=1, node_rank=n,
                                   extra=["--master-addr", "127.0.0.1", "--local-addr", f"127.0.0.{n + 1}"])
                        + ["--", *worker("env")]) for n in range(2)]
    for rc, out, err in finish(procs):
        assert rc == 0, err
        env = json.loads(out.split("]: ", 1)[1])
        assert env.get("GLOO_SOCKET_IFNAME") == "lo" and env.get("NCCL_SOCKET_IFNAME") == "lo", env


def test_a_summary_path_every_node_is_given_is_written_by_node_0_alone(jobs, tmp_path):
    """As under srun, where every node's ddplaunch gets the same command
    line: the file is the job's summary (every rank), never a node's part;
    {node_rank} gives each node its own."""
    shared, own = tmp_path / "s.json", tmp_path / "s.{node_rank}.json"
    done = finish(start_agents(jobs, free_port(), 2, [], extra=["--summary-json", shared]))
    assert [rc for rc, _, _ in done] == [0, 0], done
    assert sorted(r["rank"] for r in json.loads(shared.read_text())["ranks"]) == [0, 1, 2, 3]
    done = finish(start_agents(jobs, free_port(), 2, [], extra=["--summary-json", own]))
    assert [rc for rc, _, _ in done] == [0, 0], done
    assert sorted(p.name for p in tmp_path.glob("s.*.json")) == ["s.0.json", "s.1.json"]
