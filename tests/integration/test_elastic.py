"""Elastic jobs (--nnodes MIN:MAX): the job starts with MIN to MAX nodes; a
lost node leaves the others to go on as a smaller job while restarts remain
and at least MIN nodes are left; a node that comes while the job runs waits
and is admitted at the next round, which it starts at once while restarts
remain."""
import json
import signal

from conftest import TORCH_PYTHON, free_port, needs_torch, read_until

# Each worker start prints one line; round-0 workers of a job of `hold`
# workers then wait (exec: the worker itself is the sleep, so it dies with
# its agent).
def report_and_hold(hold_world_size):
    return ["sh", "-c", 'echo "start rank=$RANK ws=$WORLD_SIZE restarts=$TORCHELASTIC_RESTART_COUNT '
                        f'group=$GROUP_RANK"; [ "$WORLD_SIZE" != {hold_world_size} ] || exec sleep 600']


def elastic(jobs, port, nnodes, program, extra=()):
    return jobs.start(["--nnodes", nnodes, "--nproc-per-node", 2, "--master-port", port,
                       "--rdzv-timeout", 60, *extra, "--", *program])


def test_a_killed_node_leaves_the_others_to_go_on_as_a_smaller_job(jobs, tmp_path):
    port = free_port()
    # MAX joined: the job starts at once, whatever the last call.
    procs = [elastic(jobs, port, "2:3", report_and_hold(6),
                     ["--node-rank", n, "--max-restarts", 1, "--rdzv-last-call", 600,
                      "--summary-json", tmp_path / f"s{n}.json"]) for n in range(3)]
    for p in procs:
        read_until(p.stdout, "ws=6")
    procs[2].send_signal(signal.SIGKILL)
    procs[2].wait()
    for n, p in enumerate(procs[:2]):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "node 2" in err and "was lost" in err and "restart 1 of 1" in err, err
        assert f"ws=4 restarts=1 group={n}" in out, out
    s = json.loads((tmp_path / "s0.json").read_text())
    assert s["exit_code"] == 0 and s["restarts"] == 1
    assert [(r["round"], r["nnodes"], r["exit_code"]) for r in s["rounds"]] == [(0, 3, 4), (1, 2, 0)]
    assert "node 2" in s["rounds"][0]["message"]
    assert s["topology"]["nnodes"] == 2 and s["topology"]["world_size"] == 4
    assert sorted(r["rank"] for r in s["ranks"]) == [0, 1, 2, 3]


def test_a_spare_takes_a_lost_nodes_place_and_the_job_stays_at_max(jobs, tmp_path):
    """Hot spares: a third agent of a 1:2 job waits, rendezvoused, while two
    run; when node 1's agent is killed, the next round starts at once with
    the spare as node 1, at MAX nodes, and the report says which spare took
    which node's place."""
    port = free_port()
    hold = ["sh", "-c", 'echo "start rank=$RANK ws=$WORLD_SIZE restarts=$TORCHELASTIC_RESTART_COUNT '
                        'group=$GROUP_RANK"; [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || exec sleep 600']
    extra = ["--max-restarts", 1, "--rdzv-last-call", 600]
    running = [elastic(jobs, port, "1:2", hold,
                       extra + ["--node-rank", n, "--summary-json", tmp_path / f"s{n}.json"])
               for n in range(2)]
    for p in running:
        read_until(p.stdout, "ws=4")
    spare = elastic(jobs, port, "1:2", hold, extra + ["--summary-json", tmp_path / "spare.json"])
    read_until(spare.stderr, "waits to be admitted as a hot spare")
    running[1].send_signal(signal.SIGKILL)
    running[1].wait()
    ends = []
    for p in (running[0], spare):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "ws=4 restarts=1 group=" in out, (out, err)
        ends.append((out, err))
    assert "restarts=1 group=1" in ends[1][0], "the spare is node 1, as the node it replaced"
    assert "round 1: spare" in ends[0][1] and "takes the place of node 1" in ends[0][1], ends[0][1]
    s = json.loads((tmp_path / "s0.json").read_text())
    assert [(r["round"], r["nnodes"]) for r in s["rounds"]] == [(0, 2), (1, 2)]
    replaced = s["rounds"][1]["replaced"]
    assert [r["node_rank"] for r in replaced] == [1], replaced
    assert json.loads((tmp_path / "spare.json").read_text())["rounds"][-1]["replaced"] == replaced


def test_a_spare_takes_the_place_of_a_node_that_fails_its_check_before_a_restart(jobs, tmp_path):
    """Rank 0 fails in round 0; before round 1, node 1's health check fails
    and it leaves (exit 5). Its last word must not end round 1: the spare
    runs it in node 1's place, and the job succeeds with one restart."""
    port = free_port()
    broken, fail = tmp_path / "broken", tmp_path / "fail"
    program = ["sh", "-c", 'r=$TORCHELASTIC_RESTART_COUNT; echo "start rank=$RANK ws=$WORLD_SIZE '
                           'restarts=$r group=$GROUP_RANK"; [ "$r" = 0 ] || exit 0; '
                           f'if [ "$RANK" = 0 ]; then while [ ! -e {fail} ]; do sleep 0.01; done; '
                           'exit 3; fi; exec sleep 600']
    extra = ["--max-restarts", 1, "--rdzv-last-call", 600]
    node0 = elastic(jobs, port, "1:2", program,
                    extra + ["--node-rank", 0, "--summary-json", tmp_path / "s0.json"])
    node1 = elastic(jobs, port, "1:2", program,
                    extra + ["--node-rank", 1, "--health-check", f"test ! -e {broken}"])
    for p in (node0, node1):
        read_until(p.stdout, "ws=4")
    spare = elastic(jobs, port, "1:2", program, extra)
    read_until(spare.stderr, "waits to be admitted")
    broken.touch()
    fail.touch()
    out1, err1 = node1.communicate(timeout=120)
    assert node1.returncode == 5, err1
    for p in (node0, spare):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert "restarts=1 group=1" in out, (out, err)
    s = json.loads((tmp_path / "s0.json").read_text())
    assert s["restarts"] == 1
    assert [(r["round"], r["nnodes"]) for r in s["rounds"]] == [(0, 2), (1, 2)]
    assert [r["node_rank"] for r in s["rounds"][1]["replaced"]] == [1]


def test_a_node_that_joins_while_the_job_runs_is_admitted_at_once(jobs, tmp_path):
    port = free_port()
    extra = ["--max-restarts", 1, "--rdzv-last-call", 0]
    first = [elastic(jobs, port, "2:3", report_and_hold(4),
                     extra + ["--summary-json", tmp_path / f"s{n}.json"]) for n in range(2)]
    for p in first:
        read_until(p.stdout, "ws=4")
    late = elastic(jobs, port, "2:3", report_and_hold(4), extra)
    for p in first + [late]:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "ws=6 restarts=0" in out, (out, err)
    assert "waits to be admitted" in err and "admitted to the job" in err, err
    assert "group=2" in out, "the newcomer is the last node"
    s = json.loads((tmp_path / "s0.json").read_text())
    assert s["restarts"] == 0, "a membership change uses no restart"
    rounds = s["rounds"]
    assert [(r["round"], r["nnodes"], r["regroup"]) for r in rounds] == [(0, 2, True), (1, 3, False)]
    assert "joined the running job" in rounds[0]["message"]


def test_a_late_node_without_restarts_waits_and_is_told_when_the_job_ends(jobs, tmp_path):
    port = free_port()
    flag = tmp_path / "go"
    program = ["sh", "-c", f'echo "start ws=$WORLD_SIZE"; while [ ! -e {flag} ]; do sleep 0.05; done']
    first = [elastic(jobs, port, "2:4", program, ["--rdzv-last-call", 0]) for _ in range(2)]
    read_until(first[0].stdout, "start")
    late = elastic(jobs, port, "2:4", program, ["--rdzv-last-call", 0])
    seen = read_until(late.stderr, "waits to be admitted")
    assert seen and "waits to be admitted" in seen[-1], seen
    # Ctrl-C on a node that waits ends that node alone.
    leaving = elastic(jobs, port, "2:4", program, ["--rdzv-last-call", 0])
    seen = read_until(leaving.stderr, "waits to be admitted")
    assert seen and "waits to be admitted" in seen[-1], (seen, leaving.poll())
    leaving.send_signal(signal.SIGINT)
    _, err = leaving.communicate(timeout=60)
    assert leaving.returncode == 130, (seen, err)
    assert "goes on without this node" in err, err
    # A spare node waits --rdzv-timeout at most, as torchrun's join timeout.
    spare = jobs.start(["--nnodes", "2:4", "--nproc-per-node", 2, "--master-port", port,
                        "--rdzv-timeout", 1, "--", *program])
    _, err = spare.communicate(timeout=60)
    assert spare.returncode == 3, err
    assert "not admitted to the running job within --rdzv-timeout 1 s" in err, err
    flag.touch()
    for p in first:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    out, err = late.communicate(timeout=60)
    assert late.returncode == 3, err
    assert "the job ended before this node could be admitted" in err, err
    assert "start" not in out


def test_fewer_than_min_nodes_left_ends_the_job(jobs):
    port = free_port()
    procs = [elastic(jobs, port, "2:3", report_and_hold(4),
                     ["--node-rank", n, "--max-restarts", 1, "--rdzv-last-call", 0])
             for n in range(2)]
    for p in procs:
        read_until(p.stdout, "ws=4")
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    _, err = procs[0].communicate(timeout=120)
    assert procs[0].returncode == 4, err
    assert "only 1 node remain" in err and "--nnodes 2:3" in err, err


def test_an_elastic_job_starts_with_min_nodes_after_the_last_call(jobs):
    r = jobs.run(["--nnodes", "1:4", "--nproc-per-node", 2, "--master-port", free_port(),
                  "--rdzv-last-call", 0.2, "--", *report_and_hold(-1)], timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ws=2") == 2, r.stdout
    assert "1 of 1 to 4 nodes joined" in r.stderr


def test_nodes_must_agree_on_the_node_range(jobs):
    port = free_port()
    a = elastic(jobs, port, "2:3", ["true"], ["--node-rank", 0])
    b = elastic(jobs, port, "2:4", ["true"], ["--node-rank", 1])
    for p in (a, b):
        _, err = p.communicate(timeout=60)
        assert p.returncode == 3, err
        assert "has --nnodes 2:4 but node 0 has --nnodes 2:3" in err, err


TRAIN = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
ws = dist.get_world_size()
print(f"round={os.environ['TORCHELASTIC_RESTART_COUNT']} ws={ws} sum={int(t.item())}", flush=True)
assert int(t.item()) == ws, "the group is whole"
dist.barrier()
if ws == 3:
    time.sleep(600)
"""


@needs_torch
def test_pytorch_goes_on_without_a_lost_node(jobs, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    port = free_port()
    procs = [jobs.start(["--nnodes", "2:3", "--node-rank", n, "--nproc-per-node", 1,
                         "--master-port", port, "--max-restarts", 1, "--rdzv-timeout", 60,
                         "--no-python", "--", TORCH_PYTHON, script]) for n in range(3)]
    for p in procs:
        read_until(p.stdout, "ws=3 sum=3")
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    for p in (procs[0], procs[2]):
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert "round=1 ws=2 sum=2" in out, (out, err)


def test_a_fixed_size_job_keeps_extra_agents_as_spares_and_an_unused_one_ends_with_the_job(
        jobs, tmp_path):
    """--nnodes 2:2 (a fixed size) with a third agent: it waits as a hot
    spare, takes the place of a node the job loses, and a spare the job never
    needed ends with the job's exit code, saying so (it exited 3 before)."""
    port = free_port()
    hold = ["sh", "-c", 'echo "start rank=$RANK restarts=$TORCHELASTIC_RESTART_COUNT '
                        'group=$GROUP_RANK"; [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || exec sleep 600']
    extra = ["--max-restarts", 1]
    running = [elastic(jobs, port, "2:2", hold, extra + ["--node-rank", n]) for n in range(2)]
    for p in running:
        read_until(p.stdout, "start")
    spares = [elastic(jobs, port, "2:2", hold, extra) for _ in range(2)]
    for p in spares:
        seen = read_until(p.stderr, "waits to be admitted as a hot spare")
        assert seen and "hot spare" in seen[-1], (seen, p.poll())
    running[1].send_signal(signal.SIGKILL)
    running[1].wait()
    out0, err0 = running[0].communicate(timeout=120)
    assert running[0].returncode == 0, err0
    assert "round 1: spare" in err0 and "takes the place of node 1" in err0, err0
    ends = [p.communicate(timeout=120) + (p.returncode,) for p in spares]
    took = [e for e in ends if "restarts=1 group=1" in e[0]]
    unused = [e for e in ends if "restarts=1" not in e[0]]
    assert len(took) == 1 and took[0][2] == 0, ends
    assert len(unused) == 1 and unused[0][2] == 0, ends
    assert "the job ended with exit code 0 without needing this node" in unused[0][1], unused
    assert "error" not in unused[0][1], unused
