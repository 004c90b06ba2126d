"""--event-log FILE: one JSON object a line for every event of the job, in
the order it happened, as docs/EVENTS.md lists them. Each node writes its own
events; node 0 also writes the job's (the verdict, restarts, spares taken,
lost nodes)."""
import json
import os
import re
import signal
import subprocess

import pytest

import netns
from conftest import BIN, SOURCE_DIR, finish, free_port, read_until, worker

needs_netns = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))


def documented():
    """{event: its fields} as docs/EVENTS.md's table lists them."""
    with open(os.path.join(SOURCE_DIR, "docs", "EVENTS.md")) as f:
        text = f.read().split("## The events", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \| [^|]* \| [^|]* \| (.*) \|$", text, re.M)
    return {name: set(re.findall(r"`(\w+)`", fields)) for name, fields in rows}


DOCUMENTED = documented()
COMMON = {"time", "event", "node", "host"}


def events(path):
    lines = path.read_text().splitlines()
    out = [json.loads(line) for line in lines]
    for e in out:
        assert COMMON <= set(e), e
        assert e["event"] in DOCUMENTED, e
        # Every field it has is documented for it.
        assert set(e) - COMMON <= DOCUMENTED[e["event"]], (e, DOCUMENTED[e["event"]])
    times = [e["time"] for e in out]
    assert times == sorted(times), "in the order they happened"
    return out


def in_order(found, expected):
    """Whether `expected` ((event, {field: value}) pairs) occur in `found` in
    that order, other events between them."""
    i = 0
    for e in found:
        if i < len(expected) and e["event"] == expected[i][0] and \
                all(e.get(k) == v for k, v in expected[i][1].items()):
            i += 1
    return i == len(expected)


FAIL_ONCE = ["sh", "-c", 'if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; '
                         'then exit 3; fi; exit 0']


def test_a_failure_and_a_restart_on_one_node(jobs, tmp_path):
    log = tmp_path / "events.jsonl"
    r = jobs.run(["--nproc-per-node", 2, "--max-restarts", 1, "--event-log", log, "--", *FAIL_ONCE])
    assert r.returncode == 0, r.stderr
    found = events(log)
    assert in_order(found, [
        ("agent_start", {"nproc": 2, "max_restarts": 1}),
        ("round_start", {"round": 0, "world_size": 2}),
        ("rank_exit", {"round": 0, "rank": 1, "exit_code": 3, "signal": None}),
        ("round_end", {"round": 0, "exit_code": 3, "root_rank": 1, "next": "restart"}),
        ("restart", {"round": 1, "kind": "restart", "restarts": 1, "max_restarts": 1}),
        ("round_start", {"round": 1}),
        ("round_end", {"round": 1, "exit_code": 0, "next": "none"}),
        ("job_end", {"exit_code": 0, "rounds": 2, "restarts": 1}),
    ]), found
    starts = [(e["round"], e["rank"]) for e in found if e["event"] == "rank_start"]
    assert sorted(starts) == [(0, 0), (0, 1), (1, 0), (1, 1)], found
    assert all(e["node"] == 0 for e in found), found
    pids = {e["pid"] for e in found if e["event"] == "rank_start"}
    assert pids == {e["pid"] for e in found if e["event"] == "rank_exit"}, found
    # Appended: a second run adds its events after the first's.
    jobs.run(["--event-log", log, "--", *worker("exit=0")])
    assert [e["event"] for e in events(log)].count("job_end") == 2


def test_a_lost_node_a_restart_and_a_spare_on_node_0(jobs, tmp_path):
    """Node 1's agent is killed; the spare takes its place in round 1. Node
    0's log tells the whole story; node 1's spare tells only its own."""
    port = free_port()
    hold = ["sh", "-c", 'echo "start rank=$RANK"; [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || '
                        'exec sleep 600']
    logs = tmp_path / "events-{node_rank}.jsonl"

    def agent(extra):
        return jobs.start(["--nnodes", "1:2", "--nproc-per-node", 2, "--master-port", port,
                           "--rdzv-timeout", 60, "--max-restarts", 1, "--rdzv-last-call", 600,
                           "--event-log", logs, *extra, "--", *hold])
    running = [agent(["--node-rank", n]) for n in range(2)]
    for p in running:
        read_until(p.stdout, "start rank=")
    spare = agent([])
    read_until(spare.stderr, "waits to be admitted as a hot spare")
    running[1].send_signal(signal.SIGKILL)
    running[1].wait()
    for p in (running[0], spare):
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    node0 = events(tmp_path / "events-0.jsonl")
    assert in_order(node0, [
        ("rendezvous_end", {"round": 0, "nnodes": 2, "world_size": 4}),
        ("round_start", {"round": 0}),
        ("node_lost", {"round": 0, "node_rank": 1}),
        ("round_end", {"round": 0, "next": "restart"}),
        ("restart", {"round": 1, "kind": "restart"}),
        ("rendezvous_start", {"round": 1}),
        ("rendezvous_end", {"round": 1, "nnodes": 2}),
        ("spare_taken", {"round": 1, "node_rank": 1}),
        ("round_start", {"round": 1}),
        ("job_end", {"exit_code": 0, "restarts": 1}),
    ]), node0
    assert any(e["event"] == "verdict" and e["exit_code"] == 4 for e in node0), node0
    # The spare, node 1 in round 1, wrote its own events to node 1's file
    # (after the killed agent's), and none of the job's.
    node1 = events(tmp_path / "events-1.jsonl")
    own = [e for e in node1 if e["event"] == "job_end"]
    assert len(own) == 1 and own[0]["exit_code"] == 0, node1
    assert not {"verdict", "restart", "spare_taken"} & {e["event"] for e in node1}, node1


@needs_netns
def test_the_documented_line_gives_each_node_its_own_file(jobs, hosts, tmp_path):
    """docs/EVENTS.md: `ddplaunch --nnodes 2 --nproc-per-node 4 --event-log
    'events-{node_rank}.jsonl' -- ./train`, twice on one host as typed (node
    ranks automatic, port 29500: the host is a network namespace)."""
    line = [BIN, "--nnodes", 2, "--nproc-per-node", 4, "--event-log", "events-{node_rank}.jsonl",
            "--", *worker("@5:exit=3", "exit=0")]
    procs = [subprocess.Popen([str(a) for a in hosts.command("node0", line)], cwd=tmp_path,
                              env=jobs.env(None), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    jobs.procs.extend(procs)
    for rc, _, err in finish(procs):
        assert rc == 3, err
    by_node = {n: events(tmp_path / f"events-{n}.jsonl") for n in (0, 1)}
    for n, found in by_node.items():
        # Automatic ranks: a node knows its rank once the plan names it; the
        # network preflight (on by default) runs then, before the round.
        names = [e["event"] for e in found]
        known = names.index("preflight")
        assert names.index("rendezvous_start") < known < names.index("rendezvous_end"), names
        assert found[known]["ok"] is True and found[known]["blocked"] == 0, found[known]
        assert found[known]["first_blocked"] is None and found[known]["round"] == 0
        assert {e["node"] for e in found[:known]} == {None}, found
        assert {e["node"] for e in found[known:]} == {n}, found
        assert [e["event"] for e in found][:2] == ["agent_start", "rendezvous_start"], found
        assert found[-1]["event"] == "job_end" and found[-1]["exit_code"] == 3, found
        ranks = sorted(e["rank"] for e in found if e["event"] == "rank_start")
        assert ranks == list(range(4 * n, 4 * n + 4)), found
    assert any(e["event"] == "verdict" and e["root_rank"] == 5 for e in by_node[0]), by_node[0]
    assert not any(e["event"] == "verdict" for e in by_node[1]), by_node[1]


def test_a_dash_writes_the_events_to_stderr_as_torchruns_console_handler(jobs):
    for flags in (["--event-log", "-"], ["--event-log-handler", "console"]):
        r = jobs.run([*flags, "--", *worker("exit=0")])
        assert r.returncode == 0, r.stderr
        found = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
        assert [e["event"] for e in found][-1] == "job_end", r.stderr
        assert "rank_start" in {e["event"] for e in found}, r.stderr


def test_a_log_that_cannot_be_written_is_a_usage_error(jobs, tmp_path):
    r = jobs.run(["--event-log", tmp_path / "no-such-dir" / "events.jsonl", "--",
                  *worker("exit=0")])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("ddplaunch: error: --event-log "), r.stderr
    assert "cannot write it" in r.stderr and "check the directory exists" in r.stderr


def test_a_health_check_is_an_event_before_the_node_joins(jobs, tmp_path):
    log = tmp_path / "events.jsonl"
    r = jobs.run(["--health-check", "echo fine", "--event-log", log, "--", *worker("exit=0")])
    assert r.returncode == 0, r.stderr
    found = events(log)
    assert in_order(found, [
        ("health_check", {"before": "join", "ok": True, "status": "passed",
                          "command": "echo fine"}),
        ("agent_start", {}),
        ("job_end", {"exit_code": 0}),
    ]), found
