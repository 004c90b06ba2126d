"""`ddplaunch status` (docs/STATUS.md): what a running job does, asked on
demand through the job's store, from a node of the job or from elsewhere
with --master-addr/--master-port and the token."""
import json
import os
import re
import signal
import subprocess

import pytest

import netns
from conftest import BIN, finish, free_port, wait_until

STEPS = 'i=0; while true; do echo "step $i of rank $RANK"; i=$((i+1)); sleep 0.1; done'


def start_job(jobs, port, extra=()):
    return [jobs.start(["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port, *extra,
                        "--", "sh", "-c", STEPS]) for _ in range(2)]


def status(jobs, *args, env=None):
    return jobs.run(["status", *[str(a) for a in args]], env=env, timeout=60)


def status_json(jobs, port, *args):
    r = status(jobs, "--json", "--master-port", port, *args)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def stop(procs):
    for p in procs:
        p.send_signal(signal.SIGTERM)
    finish(procs)


def running(jobs, port, ranks=4):
    def ready():
        doc = status_json(jobs, port)
        ok = len(doc["ranks"]) == ranks and all(r["progress_events"] > 0 for r in doc["ranks"])
        return doc if ok else None
    return wait_until(ready, timeout=60, interval=0.2)


def test_status_shows_the_job_its_nodes_and_every_rank(jobs):
    port = free_port()
    procs = start_job(jobs, port)
    doc = running(jobs, port)
    assert doc["job"]["nnodes"] == 2 and doc["job"]["world_size"] == 4, doc
    assert sorted(n["node_rank"] for n in doc["nodes"]) == [0, 1] and doc["missing"] == []
    assert {n["state"] for n in doc["nodes"]} == {"running"}
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, r in by_rank.items():
        assert r["state"] == "running" and r["pid"] > 0 and r["rss_kib"] > 0, r
        assert r["last_line"].startswith("step ") and r["last_line"].endswith(f"rank {rank}"), r
        assert r["node_rank"] == rank // 2
    # The screen: one line per node and per rank, and the filters.
    r = status(jobs, "--master-port", port)
    assert r.returncode == 0, r.stderr
    assert "RANK" in r.stdout and "LAST LINE" in r.stdout, r.stdout
    assert sum(1 for line in r.stdout.splitlines() if "step " in line) == 4, r.stdout
    only = status_json(jobs, port, "--ranks", "1-2", "--nodes", 1)
    assert [x["rank"] for x in only["ranks"]] == [2] and [n["node_rank"] for n in only["nodes"]] == [1]
    stop(procs)


def test_a_stopped_rank_shows_its_growing_progress_age_and_a_silent_node_is_named(jobs):
    port = free_port()
    procs = start_job(jobs, port)
    doc = running(jobs, port)
    rank3 = next(r for r in doc["ranks"] if r["rank"] == 3)
    os.kill(rank3["pid"], signal.SIGSTOP)
    try:
        def rank_3(condition):
            return next((r for r in status_json(jobs, port)["ranks"]
                         if r["rank"] == 3 and condition(r)), None)
        first = wait_until(lambda: rank_3(lambda r: r["state"] == "stopped"), timeout=30)
        later = wait_until(lambda: rank_3(
            lambda r: r["since_progress_s"] > first["since_progress_s"] + 0.5), timeout=30)
        assert later["progress_events"] == first["progress_events"], (first, later)
        others = [r for r in status_json(jobs, port)["ranks"] if r["rank"] != 3]
        assert all(r["since_progress_s"] < 5 for r in others), others
    finally:
        os.kill(rank3["pid"], signal.SIGCONT)
    # Node 1's agent stopped: it cannot answer, and is named, not waited for.
    node1 = next(n for n in doc["nodes"] if n["node_rank"] == 1)
    os.kill(node1["agent_pid"], signal.SIGSTOP)
    try:
        r = status(jobs, "--master-port", port, "--timeout", 1)
        assert r.returncode == 1, r.stderr
        assert "1 did not answer in time" in r.stdout, r.stdout
        assert r.stdout.count("step ") == 2, r.stdout
    finally:
        os.kill(node1["agent_pid"], signal.SIGCONT)
    stop(procs)


def test_seven_nodes_of_fanout_two_answer_through_the_tree_and_a_silent_subtree_is_named(jobs):
    """Seven nodes of fan-out 2 on loopback: nodes 1 and 4 each gather their
    two children's answers and answer for three nodes on node 0's store.
    Every node and rank is shown, the filters hold at the leaves, and with
    node 4's agent stopped the command names nodes 4, 5 and 6 (which answer
    through it) within its --timeout and shows the others."""
    port = free_port()
    procs = [jobs.start(["--nnodes", 7, "--master-port", port, "--tree-fanout", 2,
                         "--", "sh", "-c", STEPS]) for _ in range(7)]
    doc = running(jobs, port, ranks=7)
    assert doc["job"]["tree_fanout"] == 2 and doc["missing"] == [], doc["job"]
    assert sorted(n["node_rank"] for n in doc["nodes"]) == list(range(7))
    assert sorted(r["rank"] for r in doc["ranks"]) == list(range(7))
    assert all(r["node_rank"] == r["rank"] for r in doc["ranks"]), doc["ranks"]
    only = status_json(jobs, port, "--nodes", "3,5", "--ranks", "5-6")
    assert [n["node_rank"] for n in only["nodes"]] == [3, 5] and only["missing"] == [], only
    assert [r["rank"] for r in only["ranks"]] == [5], only["ranks"]
    node4 = next(n for n in doc["nodes"] if n["node_rank"] == 4)
    os.kill(node4["agent_pid"], signal.SIGSTOP)
    try:
        r = status(jobs, "--json", "--master-port", port, "--timeout", 2)
        assert r.returncode == 1, r.stderr
        silent = json.loads(r.stdout)
        assert silent["missing"] == [4, 5, 6], silent["missing"]
        assert sorted(n["node_rank"] for n in silent["nodes"]) == [0, 1, 2, 3]
    finally:
        os.kill(node4["agent_pid"], signal.SIGCONT)
    assert running(jobs, port, ranks=7)["missing"] == []
    stop(procs)


def test_the_children_of_a_frozen_interior_node_answer_on_node_0s_store(jobs):
    """Seven nodes of fan-out 2; node 0 waits 300 s for a heartbeat, the
    others 3 s for a reply. Node 4's agent is frozen: nodes 5 and 6, its
    children, find their link to it dead within their heartbeat timeout and
    answer on node 0's store instead, so that only node 4 is missing while
    the job goes on."""
    port = free_port()
    procs = [jobs.start(["--nnodes", 7, "--node-rank", n, "--master-port", port,
                         "--tree-fanout", 2, "--heartbeat-timeout", 300 if n == 0 else 3,
                         "--", "sh", "-c", STEPS]) for n in range(7)]
    doc = running(jobs, port, ranks=7)
    node4 = next(n for n in doc["nodes"] if n["node_rank"] == 4)
    os.kill(node4["agent_pid"], signal.SIGSTOP)
    try:
        def only_node_4_missing():
            r = status(jobs, "--json", "--master-port", port, "--timeout", 2)
            d = json.loads(r.stdout) if r.returncode in (0, 1) else None
            return d if d and d["missing"] == [4] else None
        doc = wait_until(only_node_4_missing, timeout=60, interval=0.5)
        assert doc, "nodes 5 and 6 never answered on node 0's store"
        assert sorted(n["node_rank"] for n in doc["nodes"]) == [0, 1, 2, 3, 5, 6]
    finally:
        os.kill(node4["agent_pid"], signal.SIGKILL)
    finish(procs)


def test_status_as_typed_in_a_workers_shell_finds_its_own_job(jobs, tmp_path):
    """`ddplaunch status` with nothing else, in a worker's environment (an
    interactive job's shell, or the program itself)."""
    port = free_port()
    out = tmp_path / "status.txt"
    script = ('[ "$RANK" = 0 ] && { until "$DDPLAUNCH_EXE" status > ' + str(out) + '.tmp && '
              '[ $(grep -c "of rank" ' + str(out) + '.tmp) -ge 3 ]; do sleep 0.1; done; '
              f'"$DDPLAUNCH_EXE" status --json > {tmp_path}/json; '
              f'timeout 1.5 "$DDPLAUNCH_EXE" status --ranks 0-3 --watch > {tmp_path}/watch; '
              'mv ' + str(out) + '.tmp ' + str(out) + '; exit 0; }; ' + STEPS.replace("while true", f"while [ ! -e {out} ]"))
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port,
                         "--", "sh", "-c", script]) for _ in range(2)]
    for rc, _, err in finish(procs, timeout=120):
        assert rc == 0, err
    text = out.read_text()
    assert "nodes 2 (expected 2)" in text, text
    assert sum(1 for line in text.splitlines() if "of rank" in line) == 3, text
    doc = json.loads((tmp_path / "json").read_text())
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1, 2, 3], doc
    watched = (tmp_path / "watch").read_text()
    assert watched.startswith("job ") and watched.count("of rank") == 3, watched


def test_a_wrong_token_is_refused_and_bad_input_is_one_line(jobs, tmp_path):
    token = tmp_path / "token"
    token.write_text("the job's secret\n")
    token.chmod(0o600)
    wrong = tmp_path / "wrong"
    wrong.write_text("a guess\n")
    wrong.chmod(0o600)
    port = free_port()
    procs = start_job(jobs, port, ["--rdzv-token-file", token])
    wait_until(lambda: status(jobs, "--master-port", port, "--token-file", token).returncode == 0,
               timeout=60, interval=0.2)
    r = status(jobs, "--master-port", port, "--token-file", wrong)
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "step" not in r.stdout, r.stderr
    stop(procs)
    # No job at that port.
    r = status(jobs, "--master-port", free_port(), "--timeout", 1)
    assert r.returncode == 3 and "no job answers at 127.0.0.1:" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for args, says in ((["--master-port", "0"], "give a port from 1 to 65535"),
                       (["--ranks", "3-1"], "like 0,3 or 0-7,9"),
                       (["--timeout", "-1"], "give seconds"),
                       (["--master-addr", "10.0.0.1"], "needs --master-port"),
                       (["--bogus"], "status --help")):
        r = status(jobs, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_watch_redraws_until_stopped(jobs):
    port = free_port()
    procs = start_job(jobs, port)
    running(jobs, port)
    watch = jobs.start(["status", "--master-port", port, "--ranks", "0-3", "--watch", "0.2"])
    seen = []
    def two_screens():
        line = watch.stdout.readline()
        seen.append(line)
        return sum(1 for x in seen if x.startswith("job ")) >= 2
    wait_until(two_screens, timeout=30)
    watch.send_signal(signal.SIGINT)
    watch.communicate(timeout=30)
    assert sum(1 for x in seen if "of rank" in x) >= 4, seen
    stop(procs)


@pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
def test_status_from_another_host_with_the_address_port_and_token(jobs, hosts, tmp_path):
    """A job across two hosts in network namespaces, asked from node1 with
    node 0's address, the port and the job's token, as documented."""
    token = tmp_path / "job.token"
    token.write_text("s3cret of the job\n")
    token.chmod(0o600)
    port = hosts.free_port("node0")
    procs = []
    for host in hosts.names:
        argv = hosts.command(host, [BIN, "--nnodes", 2, "--nproc-per-node", 2,
                                    "--master-addr", "node0", "--master-port", port,
                                    "--rdzv-token-file", token, "--", "sh", "-c", STEPS])
        procs.append(subprocess.Popen(argv, env=jobs.env(), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True))
        jobs.procs.append(procs[-1])
    ask = hosts.command("node1", [BIN, "status", "--master-addr", "node0", "--master-port", port,
                                  "--token-file", token, "--json"])
    def answered():
        r = subprocess.run(ask, env=jobs.env(), capture_output=True, text=True, timeout=60)
        doc = json.loads(r.stdout) if r.returncode == 0 else None
        return doc if doc and len(doc["ranks"]) == 4 and all(
            x["progress_events"] > 0 for x in doc["ranks"]) else None
    doc = wait_until(answered, timeout=60, interval=0.2)
    assert {n["host"]: n["addr"] for n in doc["nodes"]} == {
        "node0": hosts.addrs["node0"], "node1": hosts.addrs["node1"]}, doc["nodes"]
    assert {r["rank"]: r["node_rank"] for r in doc["ranks"]} == {0: 0, 1: 0, 2: 1, 3: 1}
    stop(procs)


def test_a_one_node_job_answers_too_once_asked(jobs, tmp_path):
    """A one-node job (the default) has no job store: its agent connects to
    the store its workers are given once something does, and answers."""
    out = tmp_path / "status.json"
    script = ('if [ "$RANK" = 0 ]; then until "$DDPLAUNCH_EXE" status --json > ' + str(out) +
              '.tmp && grep -q "of rank 2" ' + str(out) + '.tmp; do sleep 0.1; done; '
              f'mv {out}.tmp {out}; exit 0; fi; ' +
              STEPS.replace("while true", f"while [ ! -e {out} ]"))
    r = jobs.run(["--nproc-per-node", 3, "--", "sh", "-c", script], timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["job"]["nnodes"] == 1 and doc["missing"] == [], doc
    assert sorted(x["rank"] for x in doc["ranks"]) == [0, 1, 2], doc


def test_a_node_an_elastic_job_lost_shows_as_lost(jobs):
    """--nnodes 2:3: one of three agents is killed; the job goes on with two,
    and status lists the third as lost, with the round it was lost in."""
    port = free_port()
    procs = [jobs.start(["--nnodes", "2:3", "--nproc-per-node", 1, "--master-port", port,
                         "--max-restarts", 1, "--rdzv-last-call", 600, "--rdzv-timeout", 60,
                         "--", "sh", "-c", STEPS]) for _ in range(3)]
    doc = running(jobs, port, ranks=3)
    by_pid = {p.pid: p for p in procs}
    node2 = next(n for n in doc["nodes"] if n["node_rank"] == 2)
    victim = by_pid[node2["agent_pid"]]
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    def lost_listed():
        d = status_json(jobs, port)
        return d if d["job"] and d["job"]["round"] == 1 and len(d["ranks"]) == 2 and any(
            n["state"] == "lost" for n in d["nodes"]) else None
    doc = wait_until(lost_listed, timeout=90, interval=0.2)
    assert doc, status(jobs, "--master-port", port).stdout
    lost = [n for n in doc["nodes"] if n["state"] == "lost"]
    assert lost == [{"node_rank": 2, "host": node2["host"], "addr": node2["addr"], "round": 0,
                     "state": "lost"}], doc["nodes"]
    assert sorted(n["node_rank"] for n in doc["nodes"] if n["state"] == "running") == [0, 1]
    screen = status(jobs, "--master-port", port).stdout
    assert re.search(r"^\s+2 .* lost .* in round 0$", screen, re.M), screen
    stop([p for p in procs if p is not victim])


def test_whatever_bytes_a_rank_last_wrote_the_json_document_parses(jobs):
    """A worker's last line may hold any bytes (invalid UTF-8, control
    characters, quotes, backslashes): `ddplaunch status --json` is still a
    document any JSON reader takes, the bytes that are not UTF-8 each shown
    as U+FFFD and the rest as written. The job's own output keeps the
    bytes as the worker wrote them."""
    port = free_port()
    script = r"""printf 'bad \377\376 "q" \\ \001 end\n'; exec sleep 600"""
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port,
                         "--", "sh", "-c", script], errors="surrogateescape") for _ in range(2)]

    def last_line():
        doc = status_json(jobs, port)
        lines = [r["last_line"] for r in doc["ranks"] if r["last_line"]]
        return lines if len(lines) == 2 else None
    for line in wait_until(last_line, timeout=60, interval=0.2):
        assert line.startswith("bad \ufffd\ufffd \"q\" \\ ") and line.endswith("end"), repr(line)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    out = "".join(stdout for _, stdout, _ in finish(procs))
    assert 'bad \udcff\udcfe "q" \\ \x01 end' in out, repr(out)
