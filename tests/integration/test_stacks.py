"""`ddplaunch stacks` (docs/STATUS.md, "Stacks on demand"): every rank's
stacks, taken by a debugger on its node while the job goes on."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import BIN, WORKER, finish, free_port, wait_until

pytestmark = pytest.mark.skipif(not (shutil.which("eu-stack") or shutil.which("gdb")),
                                reason="needs eu-stack (elfutils) or gdb; quickstart installs both")

PYTHON = "/usr/bin/python3"
# A Python rank asleep in a function of its own until the test releases it.
SLEEPER = """
import os, sys, time
def wait_for_release(path):
    while not os.path.exists(path):
        time.sleep(0.05)
open(sys.argv[1] + ".ready", "w").close()
wait_for_release(sys.argv[1])
"""


def py_bt_installed():
    """gdb and the interpreter's gdb extension (Debian's python3.X-dbg)."""
    exe = os.path.realpath(PYTHON)
    return bool(shutil.which("gdb")) and os.path.exists(f"/usr/share/gdb/auto-load{exe}-gdb.py")


def test_a_native_rank_in_read_and_a_python_rank_asleep_show_their_frames_and_the_job_ends_0(
        jobs, tmp_path):
    """Two nodes on loopback, one rank each: rank 0 a native program blocked
    in read(), rank 1 Python in time.sleep(). Both stacks show, and once
    released the job ends with 0 on both nodes: taking stacks stopped
    nothing."""
    port = free_port()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    release = tmp_path / "release"
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    script = (f'if [ "$RANK" = 0 ]; then exec {WORKER} ready={tmp_path} readfifo={fifo} out=done; '
              f'else exec {PYTHON} {tmp_path}/sleeper.py {release}; fi')
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port,
                         "--", "sh", "-c", script]) for _ in range(2)]
    assert wait_until(lambda: (tmp_path / "ready.0").exists()
                      and (tmp_path / "release.ready").exists(), timeout=60)
    r = jobs.run(["stacks", "--json", "--master-port", port], timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["missing"] == [] and sorted(x["rank"] for x in doc["ranks"]) == [0, 1], doc
    by_rank = {x["rank"]: x for x in doc["ranks"]}
    native = by_rank[0]["processes"][0]
    assert native["tool"] in ("eu-stack", "gdb"), native
    assert re.search(r"\bread\b|__libc_read|__GI___libc_read", native["stacks"]), native
    python = by_rank[1]["processes"][0]
    if py_bt_installed():
        assert python["tool"] == "gdb py-bt", python
        assert 'in wait_for_release' in python["stacks"] and "sleeper.py" in python["stacks"], python
        assert "note" not in python, python
    else:
        assert "-dbg" in python["note"], python  # says what to install
    # The screen: a header per rank, then its processes' stacks.
    text = jobs.run(["stacks", "--master-port", port, "--ranks", 0], timeout=120)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("=== rank 0 (node 0, "), text.stdout
    assert "=== rank 1" not in text.stdout, text.stdout
    # Released, both ranks end well, and so does the job on both nodes.
    release.touch()
    with open(fifo, "w") as f:
        f.write("x")
    results = finish(procs, timeout=120)
    for rc, _, err in results:
        assert rc == 0, err
    assert any("done" in out for _, out, _ in results), results  # rank 0 went on past read()


def test_the_documented_lines_typed_in_a_workers_shell_in_two_one_node_jobs_at_once(
        jobs, tmp_path):
    """README's and docs/STATUS.md's lines as typed, in a worker's shell of
    the default one-node job, in two such jobs of this user on this host at
    once: rank 0 asks while rank 1 sleeps in Python, and each job's answer
    is its own rank 1."""
    path = os.path.dirname(BIN) + ":" + os.environ["PATH"]
    procs = {}
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        release = d / "release"
        (d / "sleeper.py").write_text(SLEEPER)
        script = (f'if [ "$RANK" = 0 ]; then until [ -e {release}.ready ]; do sleep 0.05; done; '
                  f'ddplaunch stacks > {d}/stacks.txt && '
                  f'ddplaunch stacks --ranks 1 --json > {d}/stacks.json; '
                  f'rc=$?; touch {release}; exit $rc; fi; '
                  f'echo $$ > {d}/rank1.pid; exec {PYTHON} {d}/sleeper.py {release}')
        procs[name] = jobs.start(["--nproc-per-node", 2, "--", "sh", "-c", script],
                                 env={"PATH": path})
    for name, (rc, _, err) in zip(procs, finish(list(procs.values()), timeout=120)):
        assert rc == 0, (name, err)
    for name in procs:
        d = tmp_path / name
        text = (d / "stacks.txt").read_text()
        assert text.startswith("=== rank 0 (node 0, ") and "=== rank 1 (node 0, " in text, text
        doc = json.loads((d / "stacks.json").read_text())
        assert [x["rank"] for x in doc["ranks"]] == [1] and doc["missing"] == [], doc
        assert doc["ranks"][0]["pid"] == int((d / "rank1.pid").read_text()), (name, doc)
        frames = doc["ranks"][0]["processes"][0]["stacks"]
        if py_bt_installed():
            assert "wait_for_release" in frames and f"{d}/sleeper.py" in frames, frames
        else:
            assert "nanosleep" in frames, frames


def test_the_workers_credential_may_not_ask_for_stacks_the_jobs_token_may(jobs, tmp_path):
    token = tmp_path / "token"
    token.write_text("the job's secret\n")
    token.chmod(0o600)
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port,
                         "--rdzv-token-file", token, "--", WORKER, f"ready={tmp_path}",
                         f"waitfile={tmp_path}/release"]) for _ in range(2)]
    assert wait_until(lambda: (tmp_path / "ready.0").exists()
                      and (tmp_path / "ready.1").exists(), timeout=60)
    worker_env = dict(l.split("=", 1) for l in open(f"/proc/{find_worker(tmp_path)}/environ")
                      .read().split("\0") if l.startswith("DDPLAUNCH_STORE_"))
    refused = jobs.run(["stacks"], env={**worker_env, "DDPLAUNCH_RDZV_TOKEN": ""}, timeout=60)
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "may not ask for stacks" in lines[0] and "--token-file" in lines[0], \
        refused.stderr
    # status, read-only, is open to the workers' credential.
    assert jobs.run(["status"], env={**worker_env, "DDPLAUNCH_RDZV_TOKEN": ""},
                    timeout=60).returncode == 0
    r = jobs.run(["stacks", "--master-port", port, "--token-file", token, "--json"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(x["rank"] for x in json.loads(r.stdout)["ranks"]) == [0, 1]
    (tmp_path / "release").touch()
    for rc, _, err in finish(procs, timeout=120):
        assert rc == 0, err


def find_worker(tmp_path):
    """The pid of a ddplaunch_worker of this test (its argv names tmp_path)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith(WORKER) and str(tmp_path) in cmdline:
            return int(pid)
    raise AssertionError("no worker found")


def test_bad_input_is_one_line_and_no_job_is_exit_3(jobs):
    r = jobs.run(["stacks", "--ranks", "x"], timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = jobs.run(["stacks", "--master-port", free_port(), "--timeout", 1], timeout=60)
    assert r.returncode == 3 and "no job answers" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_debuggers_past_the_timeout_are_stopped_and_the_ranks_go_on(jobs, tmp_path):
    """--timeout 1 is shorter than gdb needs to read Python's symbols: each
    node answers in time with what it has (the debuggers it stopped named),
    and every rank goes on to print all its lines and end with 0."""
    port = free_port()
    (tmp_path / "tick.py").write_text(
        "import os, time\n"
        "def tick():\n"
        "    for i in range(30):\n"
        "        print('tick', i, flush=True)\n"
        "        time.sleep(0.1)\n"
        f"open('{tmp_path}/ready.' + os.environ['RANK'], 'w').close()\n"
        f"while not os.path.exists('{tmp_path}/go'):\n"
        "    time.sleep(0.02)\n"
        "tick()\n")
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port, "--",
                         PYTHON, tmp_path / "tick.py"]) for _ in range(2)]
    assert wait_until(lambda: all((tmp_path / f"ready.{r}").exists() for r in range(4)),
                      timeout=60)
    (tmp_path / "go").touch()
    r = jobs.run(["stacks", "--json", "--master-port", port, "--timeout", 1], timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(x["rank"] for x in doc["ranks"]) == [0, 1, 2, 3], doc
    for rank in doc["ranks"]:
        for p in rank["processes"]:
            cut_short = any(s in p.get("note", "") for s in ("did not finish in time", "not taken"))
            assert cut_short or p["stacks"], p
    results = finish(procs, timeout=120)
    for rc, out, err in results:
        assert rc == 0, err
    out = "".join(o for _, o, _ in results)
    for rank in range(4):
        assert f"[rank {rank}]: tick 29" in out, out


# The documented --python-stacks-signal job: rank 1 sleeps in a function of
# its own, beside a child it forked (as a DataLoader does); rank 0 types the
# documented stacks lines, then releases it.
TRAIN = """
import os, subprocess, sys, time
def wait_for_release():
    while not os.path.exists("release"):
        time.sleep(0.05)
def child_waits():
    while not os.path.exists("release"):
        time.sleep(0.05)
if os.environ["RANK"] == "1":
    child = os.fork()
    if child == 0:
        child_waits()
        os._exit(0)
    with open("rank1.pids", "w") as f:
        f.write(f"{os.getpid()} {child}")
    wait_for_release()
    os.waitpid(child, 0)
else:
    while not os.path.exists("rank1.pids"):
        time.sleep(0.05)
    with open("stacks.txt", "w") as out:
        subprocess.run(["ddplaunch", "stacks", "--ranks", "1"], stdout=out, check=True)
    with open("stacks.json", "w") as out:
        subprocess.run(["ddplaunch", "stacks", "--ranks", "1", "--json"], stdout=out, check=True)
    open("release", "w").close()
"""


def test_the_documented_python_stacks_signal_job_shows_python_frames_without_gdb(jobs, tmp_path):
    """docs/STATUS.md's --python-stacks-signal lines as typed, in two jobs
    of this user on this host at once (`python3` the first on PATH, whatever
    it is, with or without python3-dbg): each rank 1 and the child it forked
    give their own Python frames through the signal, nothing of them reaches
    the job's output, and every job ends 0 with its files gone."""
    path = os.path.dirname(BIN) + ":" + os.environ["PATH"]
    procs = {}
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "train.py").write_text(TRAIN)
        procs[name] = jobs.start(["--nproc-per-node", 2, "--python-stacks-signal", "USR2", "--",
                                  "python3", "train.py"], env={"PATH": path}, cwd=d)
    for name, (rc, out, err) in zip(procs, finish(list(procs.values()), timeout=120)):
        assert rc == 0, (name, err)
        assert "most recent call first" not in out + err, (name, out, err)
    for name in procs:
        d = tmp_path / name
        parent, child = map(int, (d / "rank1.pids").read_text().split())
        doc = json.loads((d / "stacks.json").read_text())
        assert [x["rank"] for x in doc["ranks"]] == [1] and doc["missing"] == [], doc
        assert doc["ranks"][0]["pid"] == parent, (name, doc)
        processes = {p["pid"]: p for p in doc["ranks"][0]["processes"]}
        assert child in processes, (name, doc)
        for pid, function in ((parent, "wait_for_release"), (child, "child_waits")):
            p = processes[pid]
            assert p["tool"].startswith("faulthandler"), p
            assert f'File "{d}/train.py", line' in p["stacks"] and f"in {function}" in p["stacks"], p
            assert "note" not in p, p
        text = (d / "stacks.txt").read_text()
        assert text.startswith(f"=== rank 1 (node 0, ") and "in wait_for_release" in text, text
    assert wait_until(lambda: not hooks_left(), timeout=10), "the job directories went with the jobs"


def hooks_left():
    """The job directories in /dev/shm holding a --python-stacks-signal hook."""
    return [e for e in os.listdir("/dev/shm") if e.startswith("ddplaunch-job-")
            and os.path.exists(f"/dev/shm/{e}/python/sitecustomize.py")]


def test_a_users_own_sitecustomize_still_runs_and_an_isolated_python_says_why_it_has_no_frames(
        jobs, tmp_path):
    """Two nodes on loopback with --python-stacks-signal RTMIN+2: the
    sitecustomize.py on the user's PYTHONPATH still runs in every rank (ddplaunch's
    runs it after arming), and a rank started with `python3 -I` (which reads
    no PYTHONPATH) is not signalled: its note says why. That rank runs a copy
    of the interpreter, which gdb has no Python extension for."""
    port = free_port()
    (tmp_path / "bin").mkdir()
    copy = tmp_path / "bin" / os.path.basename(os.path.realpath(PYTHON))
    shutil.copy(os.path.realpath(PYTHON), copy)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text(
        "import os\n"
        f"open('{tmp_path}/mine.' + os.environ['RANK'], 'w').write(__file__)\n")
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    release = tmp_path / "release"
    script = (f'if [ "$RANK" = 0 ]; then exec {copy} -I {tmp_path}/sleeper.py {release}.0; fi; '
              f'exec {PYTHON} {tmp_path}/sleeper.py {release}.1')
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 1, "--master-port", port,
                         "--python-stacks-signal", "RTMIN+2", "--", "sh", "-c", script],
                        env={"PYTHONPATH": str(mine)}) for _ in range(2)]
    assert wait_until(lambda: (tmp_path / "release.0.ready").exists()
                      and (tmp_path / "release.1.ready").exists(), timeout=60)
    assert (tmp_path / "mine.1").read_text() == str(mine / "sitecustomize.py")
    assert not (tmp_path / "mine.0").exists(), "python -I reads no PYTHONPATH"
    r = jobs.run(["stacks", "--json", "--master-port", port], timeout=120)
    assert r.returncode == 0, r.stderr
    by_rank = {x["rank"]: x["processes"][0] for x in json.loads(r.stdout)["ranks"]}
    assert by_rank[1]["tool"].startswith("faulthandler") and "in wait_for_release" in \
        by_rank[1]["stacks"], by_rank[1]
    isolated = by_rank[0]
    assert isolated["tool"] in ("eu-stack", "gdb"), isolated
    assert "-dbg" in isolated["note"] and "python -I" in isolated["note"], isolated
    for rank in (0, 1):
        (tmp_path / f"release.{rank}").touch()
    for rc, _, err in finish(procs, timeout=120):
        assert rc == 0, err
