"""--max-restarts: when a rank fails and restarts remain, every worker on
every node is stopped and started again (TORCHELASTIC_RESTART_COUNT one
more, a fresh MASTER_PORT), with one count for the whole job; a stop signal,
a lost node or a program that cannot start is never restarted."""
import json
import os
import signal

import pytest
from conftest import TORCH_PYTHON, all_stopped, free_port, needs_torch, read_until, wait_until

# Each start of a worker prints one line: its rank, round and MASTER_PORT.
REPORT = 'echo "start rank=$RANK round=$TORCHELASTIC_RESTART_COUNT port=$MASTER_PORT"'


def failing_once(rank, code=3, rest="exit 0"):
    """A worker whose rank `rank` fails with `code` in round 0 only."""
    return ["sh", "-c", f'{REPORT}; if [ "$RANK" = {rank} ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; '
                        f'then echo "boom in round 0" >&2; exit {code}; fi; {rest}']


def starts(out):
    """(rank, round, port) of every worker start printed on stdout."""
    found = []
    for line in out.splitlines():
        if "start rank=" in line:
            fields = dict(f.split("=") for f in line.split("start ", 1)[1].split())
            found.append((int(fields["rank"]), int(fields["round"]), int(fields["port"])))
    return found


def check_rounds(seen, ranks, failing):
    """Round 1 started every rank once; round 0 the failing rank and maybe
    others (a rank stopped before its shell printed is not seen)."""
    by_round = {}
    for rank, rnd, _ in seen:
        by_round.setdefault(rnd, []).append(rank)
    assert sorted(by_round) == [0, 1], seen
    assert sorted(by_round[1]) == list(range(ranks)), seen
    assert failing in by_round[0] and len(set(by_round[0])) == len(by_round[0]), seen


def nodes(jobs, nnodes, nproc, program, extra=()):
    port = free_port()
    return [jobs.start(["--nnodes", nnodes, "--node-rank", n, "--nproc-per-node", nproc,
                        "--master-port", port, "--rdzv-timeout", 60, *extra, "--", *program])
            for n in range(nnodes)]


def test_one_node_restarts_a_failed_job_that_then_succeeds(jobs, tmp_path):
    logs = tmp_path / "logs"
    r = jobs.run(["--nproc-per-node", 2, "--max-restarts", 1, "--log-dir", logs,
                  "--summary-json", tmp_path / "s.json", "--", *failing_once(1)])
    assert r.returncode == 0, r.stderr
    assert "restarting every worker (restart 1 of 1)" in r.stderr
    seen = starts(r.stdout)
    check_rounds(seen, ranks=2, failing=1)
    ports = {rnd: port for _, rnd, port in seen}
    assert len(ports) == 2 and ports[0] != ports[1], "a fresh MASTER_PORT each round"
    # Every round's logs are kept: DIR/RANK for the first, DIR/RANK/attempt_1 next.
    assert "boom in round 0" in (logs / "1" / "stderr.log").read_text()
    assert "round=1" in (logs / "1" / "attempt_1" / "stdout.log").read_text()
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["exit_code"] == 0 and s["restarts"] == 1 and s["max_restarts"] == 1
    assert [(x["round"], x["exit_code"]) for x in s["rounds"]] == [(0, 3), (1, 0)]
    assert s["rounds"][0]["root_cause"]["rank"] == 1


def test_three_nodes_restart_together_and_finish(jobs):
    procs = nodes(jobs, 3, 2, failing_once(3, rest="sleep 0.2"), extra=["--max-restarts", 2])
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "rank 3 (node 1, host" in err and "restart 1 of 2" in err, err
        outs.append(out)
    seen = [s for out in outs for s in starts(out)]
    check_rounds(seen, ranks=6, failing=3)
    ports = {}
    for _, rnd, port in seen:
        ports.setdefault(rnd, set()).add(port)
    assert all(len(p) == 1 for p in ports.values()), "one MASTER_PORT per round on every node"
    assert ports[0] != ports[1]


def test_restarts_exhausted_end_with_the_root_causes_code(jobs):
    procs = nodes(jobs, 2, 2, ["sh", "-c", f'{REPORT}; [ "$RANK" = 2 ] && exit 5; sleep 300'],
                  extra=["--max-restarts", 1])
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 5, err
        assert "round 0 failed: rank 2 (node 1" in err and "restarted (1 of 1)" in err, err
        assert "job failed: rank 2 (node 1" in err, err
    # Nothing of the last round is left: the sleeping ranks were stopped.


def test_a_stop_signal_is_never_restarted(jobs, tmp_path):
    program = ["sh", "-c", f'{REPORT}; touch {tmp_path}/ready.$RANK.$TORCHELASTIC_RESTART_COUNT; sleep 300']
    procs = nodes(jobs, 2, 1, program, extra=["--max-restarts", 3])
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 2, timeout=60)
    procs[1].send_signal(signal.SIGINT)
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, err
        assert "restarting" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["ready.0.0", "ready.1.0"]


def test_a_signal_while_the_job_restarts_ends_every_node(jobs, tmp_path):
    # Node 1's rank fails once node 0's runs; node 0's rank ignores SIGTERM,
    # so the round takes its grace period to end, and node 1 waits for node 0
    # meanwhile.
    program = ["sh", "-c", f'{REPORT}; if [ "$RANK" = 1 ]; then '
                           f'while [ ! -e {tmp_path}/ready.0.0 ]; do sleep 0.01; done; exit 7; fi; '
                           f'trap "" TERM; touch {tmp_path}/ready.$RANK.$TORCHELASTIC_RESTART_COUNT; sleep 300']
    procs = nodes(jobs, 2, 1, program, extra=["--max-restarts", 1, "--term-timeout", 30])
    # Node 1's workers have ended and it waits for node 0 in the next round.
    seen = read_until(procs[1].stderr, "restarting every worker")
    assert seen and "restarting every worker" in seen[-1], seen
    procs[0].send_signal(signal.SIGTERM)  # while its rank ignores the stop
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 143, "".join(seen) + err
    assert not any(name.endswith(".1") for name in os.listdir(tmp_path)), "no round 1 started"


def test_a_node_killed_while_its_workers_stop_for_a_restart_is_heard_at_once(jobs, tmp_path):
    """Node 0's rank fails; node 1's rank ignores SIGTERM, so node 1 spends
    its grace period (--term-timeout 60) stopping it. Node 1's agent is
    SIGKILLed meanwhile: its last word (ON_CLOSE) is already on the next
    round's stop key, so node 0 hears at once that node 1 was lost, not
    after its heartbeat timeout (set out of reach here)."""
    program = ["sh", "-c", f'{REPORT}; if [ "$RANK" = 0 ]; then '
                           f'while [ ! -e {tmp_path}/ready ]; do sleep 0.01; done; exit 7; fi; '
                           f'trap "touch {tmp_path}/term" TERM; touch {tmp_path}/ready; '
                           'while :; do sleep 0.05; done']
    procs = nodes(jobs, 2, 1, program,
                  extra=["--max-restarts", 1, "--term-timeout", 60, "--heartbeat-timeout", 600])
    assert wait_until(lambda: (tmp_path / "term").exists(), timeout=60), "node 1 never stopped its rank"
    procs[1].kill()
    procs[1].wait()
    out, err = procs[0].communicate(timeout=120)
    assert procs[0].returncode == 4, err
    assert "node 1 (" in err and "was lost: its agent's connection to the store closed" in err, err


def test_nodes_must_agree_on_max_restarts(jobs):
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--master-port", port, "--rdzv-timeout", 60,
                         "--max-restarts", n, "--", "true"]) for n in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3, err
        assert "has --max-restarts 1 but node 0 has --max-restarts 0" in err, err


def test_a_rerun_never_overwrites_an_earlier_jobs_logs(jobs, tmp_path):
    for text in ("first", "second"):
        r = jobs.run(["--log-dir", tmp_path, "--", "sh", "-c", f"echo {text}"])
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "0" / "stdout.log").read_text() == "second\n"
    assert (tmp_path / "0" / "stdout.log.1").read_text() == "first\n"


@needs_torch
def test_pytorch_ddp_survives_one_injected_failure(jobs):
    script = os.path.join(os.path.dirname(__file__), "..", "helpers", "torch_restart.py")
    procs = nodes(jobs, 2, 2, [TORCH_PYTHON, script], extra=["--max-restarts", 1])
    lines = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "restart 1 of 1" in err, err
        lines += [l for l in out.splitlines() if "whole" in l]
    assert len(lines) == 4, lines
    assert all("round 1: group of 4 whole, all-reduce 10" in l for l in lines), lines


def test_node_0_gone_before_the_restart_ends_the_other_nodes(jobs, tmp_path):
    # Rank 1 fails; node 1's other rank ignores SIGTERM, so node 1 is still
    # ending the round when node 0 (the store) is killed after hearing the
    # verdict. Node 1 cannot restart without the store: it exits 4, never
    # waiting forever.
    program = ["sh", "-c",
               f'if [ "$RANK" = 0 ]; then trap "touch {tmp_path}/term.0; exit 0" TERM; touch {tmp_path}/ready.0; '
               'sleep 300 & wait; fi; '
               f'if [ "$RANK" = 2 ]; then trap "" TERM; touch {tmp_path}/ready.2; sleep 300; fi; '
               f'while [ ! -e {tmp_path}/ready.0 ] || [ ! -e {tmp_path}/ready.2 ]; do sleep 0.01; done; exit 7']
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--nproc-per-node", 1 if n == 0 else 2,
                         "--master-port", port, "--rdzv-timeout", 60, "--max-restarts", 1,
                         "--term-timeout", 3, "--", *program]) for n in range(2)]
    # Node 0 heard the verdict (it stopped its rank): now it goes.
    assert wait_until(lambda: (tmp_path / "term.0").exists(), timeout=60)
    procs[0].kill()
    procs[0].wait()
    out, err = procs[1].communicate(timeout=60)
    assert procs[1].returncode == 4, err
    assert "lost contact with the store" in err, err


def test_a_node_still_joining_when_a_rank_fails_restarts_with_the_others(jobs):
    # Node 1 has joined but is frozen before it reads the plan; the round
    # starts on the others, and rank 0 fails at once. When node 1 wakes, it
    # holds both the plan and the verdict: it must restart with the job, not
    # end alone (which left the others waiting for it at the restart).
    # (--no-preflight: the network preflight would hold the round until node
    # 1 reports.)
    port = free_port()
    program = failing_once(0, rest="exit 0")

    def node(n, *extra):
        return jobs.start(["--nnodes", 3, "--node-rank", n, "--nproc-per-node", 1, "--master-port",
                           port, "--max-restarts", 1, "--no-preflight", *extra, "--", *program])

    first = node(0)
    frozen = node(1, "--log-level", "debug")
    read_until(frozen.stderr, "waiting for node 0's plan")
    os.kill(frozen.pid, signal.SIGSTOP)
    assert wait_until(lambda: all_stopped(frozen.pid), timeout=30)
    last = node(2)
    read_until(first.stderr, "restarting every worker")
    os.kill(frozen.pid, signal.SIGCONT)
    for p in (first, frozen, last):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "round=1" in out, (out, err)


def test_following_progress_rounds_without_progress_use_no_restart_and_end_the_job(jobs, tmp_path):
    """--restart-min-progress: a failure that repeats before any progress
    (no output line, no progress-fd write) is not retried --max-restarts
    times; --max-no-progress-restarts rounds in a row end the job."""
    r = jobs.run(["--max-restarts", 5, "--restart-min-progress", 1, "--max-no-progress-restarts", 2,
                  "--summary-json", tmp_path / "s.json", "--", "sh", "-c", "exit 3"])
    # Retrying cannot help: 93, for a wrapper that would requeue the job.
    assert r.returncode == 93, r.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["exit_code"] == 93 and s["root_cause"]["exit_code"] == 3, s
    assert "exit code 93: retrying cannot help, do not requeue" in r.stderr, r.stderr
    assert s["restarts"] == 0, "--max-restarts was not used"
    assert [(x["round"], x["made_progress"], x["progress_events"]) for x in s["rounds"]] == \
        [(0, False, 0), (1, False, 0), (2, False, 0)]
    assert "3 rounds in a row failed without progress" in r.stderr, r.stderr
    assert "round 1 failed without progress (0 progress events on this node)" in r.stderr, r.stderr


def test_following_progress_a_round_with_progress_uses_a_restart(jobs, tmp_path):
    # A write to DDPLAUNCH_PROGRESS_FD (no output line) is progress.
    r = jobs.run(["--max-restarts", 1, "--restart-min-progress", 1,
                  "--summary-json", tmp_path / "s.json",
                  "--", "sh", "-c", "printf x >&$DDPLAUNCH_PROGRESS_FD; exit 3"])
    assert r.returncode == 3, r.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["restarts"] == 1 and [x["made_progress"] for x in s["rounds"]] == [True, True], s["rounds"]
    assert "restarted (1 of 1)" in r.stderr, r.stderr
    # Fewer output lines than --restart-min-progress asks for are no progress.
    r = jobs.run(["--max-restarts", 1, "--restart-min-progress", 3, "--max-no-progress-restarts", 1,
                  "--", "sh", "-c", "echo one; echo two; exit 3"])
    assert r.returncode == 93, r.stderr
    assert "round 0 failed without progress (2 progress events on this node)" in r.stderr, r.stderr
    assert "(1 of 1)" not in r.stderr, "--max-restarts was not used"


def test_the_progress_flags_as_typed(jobs, tmp_path):
    # --max-restarts 0 (the default) is no restart, whatever --restart-min-progress says.
    r = jobs.run(["--restart-min-progress", 100, "--summary-json", tmp_path / "a.json", "--",
                  "sh", "-c", "exit 3"])
    assert r.returncode == 3, r.stderr
    assert len(json.loads((tmp_path / "a.json").read_text())["rounds"]) == 1, r.stderr
    assert "restarting" not in r.stderr, r.stderr
    # --max-no-progress-restarts alone follows progress (said once), and a
    # worker restarted after a round without progress can tell it is one.
    counts = tmp_path / "counts"
    r = jobs.run(["--max-restarts", 3, "--max-no-progress-restarts", 1, "--", "sh", "-c",
                  f"echo $TORCHELASTIC_RESTART_COUNT >> {counts}; exit 3"])
    assert r.returncode == 93, r.stderr
    assert "--restart-min-progress 1" in r.stderr, r.stderr
    assert "round 0 failed without progress" in r.stderr, r.stderr
    assert counts.read_text().split() == ["0", "1"], counts.read_text()


def test_following_progress_every_node_agrees(jobs):
    procs = nodes(jobs, 2, 1, ["sh", "-c", '[ "$RANK" = 1 ] && exit 4; sleep 300'],
                  extra=["--max-restarts", 3, "--restart-min-progress", 1,
                         "--max-no-progress-restarts", 1])
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 93, err
        assert "round 0 failed without progress" in err and "2 rounds in a row" in err, err


def test_a_new_round_never_starts_beside_what_the_last_one_left(jobs, tmp_path):
    """A rank that leaves a chain of 12 processes outside its group (each
    the child of the last: deeper than the per-round sweep of reparented
    children reaches) fails; before round 1 starts, every one of them is
    gone (found by the job's marker and killed)."""
    deepest = tmp_path / "deepest"
    chain = tmp_path / "chain.sh"
    chain.write_text('n=$1; if [ "$n" -le 0 ]; then echo $$ > "$2"; exec sleep 300; fi\n'
                     'sh "$0" $((n-1)) "$2" & wait\n')
    worker = (f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then setsid sh {chain} 12 {deepest} & '
              f'while [ ! -s {deepest} ]; do sleep 0.01; done; exit 3; fi; '
              f'if kill -0 "$(cat {deepest})" 2>/dev/null; then echo leftover alive; '
              f'else echo leftover gone; fi')
    r = jobs.run(["--max-restarts", 1, "--", "sh", "-c", worker])
    assert r.returncode == 0, r.stderr
    assert "leftover gone" in r.stdout, r.stdout
    assert "the last round left behind" in r.stderr, r.stderr
