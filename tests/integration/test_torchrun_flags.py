"""Every torchrun 2.x flag, as docs/TORCHRUN.md lists it, is accepted, with
its underscore spelling and its PET_* variable; those with a meaning here
have it."""
import json
import os
import re

import pytest

from conftest import SOURCE_DIR, env_lines, worker

# One valid value per torchrun flag (None: takes no value).
VALUES = {
    "--nnodes": "1", "--nproc-per-node": "2", "--rdzv-backend": "c10d",
    "--rdzv-endpoint": "localhost:0", "--rdzv-id": "job7", "--rdzv-conf": "timeout=5",
    "--standalone": None, "--max-restarts": "0", "--monitor-interval": "0.1",
    "--start-method": "spawn", "--event-log-handler": "null", "--role": "trainer",
    "--module": None, "--no-python": None, "--run-path": None, "--log-dir": "LOGS",
    "--redirects": "0", "--tee": "0", "--local-ranks-filter": "0,1", "--node-rank": "0",
    "--master-addr": "127.0.0.1", "--master-port": "29555", "--local-addr": "127.0.0.1",
    "--logs-specs": "custom", "--numa-binding": "node",
    "--signals-to-handle": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
    "--shutdown-timeout": "5", "--virtual-local-rank": None,
    "--duplicate-stdout-filters": "apple,orange", "--duplicate-stderr-filters": "error",
}


def documented_flags():
    with open(os.path.join(SOURCE_DIR, "docs", "TORCHRUN.md")) as f:
        text = f.read()
    table = text.split("| torchrun flag |")[1].split("\n\n")[0]
    flags = []
    for row in table.splitlines()[2:]:
        first = row.split("|")[1]
        flags += re.findall(r"`(?:-\w`, `)?(--[\w-]+)", first)
    return flags


def test_the_table_lists_every_torchrun_flag():
    assert set(documented_flags()) == set(VALUES)


@pytest.mark.parametrize("flag", documented_flags())
@pytest.mark.parametrize("spelling", ["dash", "underscore"])
def test_each_flag_is_accepted(jobs, tmp_path, flag, spelling):
    """Each row of docs/TORCHRUN.md's table, as written there, parses."""
    assert flag in VALUES, f"{flag} is documented but no test value is given for it"
    name = flag if spelling == "dash" else "--" + flag[2:].replace("-", "_")
    value = VALUES[flag]
    args = [name] if value is None else [name, value.replace("LOGS", str(tmp_path / "logs"))]
    r = jobs.run(["--dry-run", *args, "--", "train.py"])
    assert r.returncode == 0, (name, r.stderr)
    json.loads(r.stdout)


@pytest.mark.parametrize("variable,value,check", [
    ("PET_MODULE", "1", lambda d: d["workers"][0]["argv"][:3] == ["python3", "-u", "-m"]),
    ("PET_NO_PYTHON", "1", lambda d: d["workers"][0]["argv"][0] == "train.py"),
    ("PET_RUN_PATH", "1", lambda d: d["workers"][0]["argv"][:2] == ["python3", "-u"]),
    ("PET_LOCAL_ADDR", "10.1.2.3", lambda d: d["sources"]["local_addr"] == "PET_LOCAL_ADDR"),
    ("PET_LOCAL_RANKS_FILTER", "0", lambda d: d["sources"]["local_ranks_filter"] == "PET_LOCAL_RANKS_FILTER"),
    ("PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", lambda d: d["sources"]["signals_to_handle"] == "PET_SIGNALS_TO_HANDLE"),
    ("PET_EVENT_LOG_HANDLER", "null", lambda d: d["sources"]["event_log_handler"] == "PET_EVENT_LOG_HANDLER"),
])
def test_pet_variables(jobs, variable, value, check):
    r = jobs.run(["--dry-run", "--", "train.py"], env={variable: value, "PYTHON_EXEC": "python3"})
    assert r.returncode == 0, r.stderr
    assert check(json.loads(r.stdout)), r.stdout


def test_run_path_runs_a_script_without_py_under_python(jobs, tmp_path):
    script = tmp_path / "train"
    script.write_text("import os, sys\nprint('python', os.environ['RANK'], sys.argv[1:])\n")
    r = jobs.run(["--run-path", "--no-python", "--python", "/usr/bin/python3", "--", script, "x"])
    assert r.returncode == 0, r.stderr
    assert "[rank 0]: python 0 ['x']" in r.stdout


def test_ignored_flags_say_so_once(jobs):
    r = jobs.run(["--logs-specs", "fancy", "--event-log-handler", "dynamic_rendezvous", "--",
                  *worker()])
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("--logs-specs fancy is ignored") == 1
    assert r.stderr.count("--event-log-handler dynamic_rendezvous is ignored") == 1


def test_signals_to_handle_is_checked(jobs):
    r = jobs.run(["--signals-to-handle", "SIGTERM,SIGBOGUS", "--", *worker()])
    assert r.returncode == 2
    assert "'SIGBOGUS' is not a signal ddplaunch handles" in r.stderr
    r = jobs.run(["--signals-to-handle", "SIGUSR1,SIGTERM", "--", *worker()])
    assert r.returncode == 0
    assert "leaves out SIGINT, SIGHUP, SIGQUIT: ddplaunch still stops the job cleanly" in r.stderr


def test_xpu_without_intel_gpus_is_a_clear_error(jobs):
    if any(open(f"/sys/class/drm/{d}/device/vendor").read().strip() == "0x8086"
           for d in (os.listdir("/sys/class/drm") if os.path.isdir("/sys/class/drm") else [])
           if os.path.exists(f"/sys/class/drm/{d}/device/vendor")):
        pytest.skip("this machine has an Intel GPU")
    r = jobs.run(["--nproc-per-node", "xpu", "--", *worker()])
    assert r.returncode == 2
    assert "--nproc-per-node xpu: no Intel GPU found" in r.stderr


def test_local_rank_macro_and_torch_distributed_launch_argument(jobs, tmp_path):
    script = tmp_path / "show_args"
    script.write_text('#!/bin/sh\necho "$@"\n')
    script.chmod(0o755)
    r = jobs.run(["--nproc-per-node", 2, "--local-rank-arg", "underscore", "--use_env", "--",
                  script, "--device=cuda:${local_rank}"])
    assert r.returncode == 0, r.stderr
    assert "[rank 1]: --local_rank=1 --device=cuda:1" in r.stdout


@pytest.mark.parametrize("args,env,expected", [
    (["--shutdown-timeout", "7"], {}, "7"),
    ([], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "9"}, "9"),
    ([], {"PET_SHUTDOWN_TIMEOUT": "8", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "9"}, "8"),
    (["--term-timeout", "3"], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "9"}, "3"),
])
def test_shutdown_timeout_is_the_term_timeout(jobs, args, env, expected):
    r = jobs.run(["--dry-run", *args, "--", "train.py"], env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["config"]["term_timeout"] == float(expected), r.stdout


def test_a_bad_shutdown_timeout_variable_is_a_usage_error(jobs):
    r = jobs.run(["--", *worker()], env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"})
    assert r.returncode == 2, r.stderr
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_shutdown_timeout_bounds_the_grace_period(jobs, tmp_path):
    """A worker that ignores SIGTERM is killed after --shutdown-timeout."""
    r = jobs.run(["--nproc-per-node", 2, "--shutdown-timeout", "0.5", "--", *worker(
        "ignore-term", f"ready={tmp_path}", f"@0:waitfile={tmp_path / 'ready.1'}", "@0:exit=3",
        "sleep=60")], timeout=60)
    assert r.returncode == 3, r.stderr
    assert "SIGKILL" in r.stderr, r.stderr


def test_virtual_local_rank_gives_each_worker_device_0(jobs):
    r = jobs.run(["--nproc-per-node", 3, "--virtual-local-rank", "--", *worker("env")],
                 env={"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert r.returncode == 0, r.stderr
    envs = env_lines(r.stdout)
    assert sorted(envs) == [0, 1, 2]
    for rank, e in envs.items():
        assert e["LOCAL_RANK"] == "0", e
        assert e["CUDA_VISIBLE_DEVICES"] == str(4 + rank), e
        assert e["RANK"] == str(rank) and e["LOCAL_WORLD_SIZE"] == "3", e


def test_duplicate_filters_copy_matching_lines_to_the_nodes_filtered_files(jobs, tmp_path):
    logs = tmp_path / "logs"
    r = jobs.run(["--nproc-per-node", 2, "--log-dir", logs,
                  "--duplicate-stdout-filters", "apple,,pie,orange",
                  "--duplicate-stderr-filters", "boom", "--",
                  "sh", "-c", 'echo "apple,pie $RANK"; echo "pear $RANK"; echo "orange $RANK";'
                  ' echo "apple $RANK"; echo "boom $RANK" >&2; echo "quiet $RANK" >&2'])
    assert r.returncode == 0, r.stderr
    out = (logs / "node_0" / "filtered_stdout.log").read_text().splitlines()
    err = (logs / "node_0" / "filtered_stderr.log").read_text().splitlines()
    assert sorted(out) == sorted([f"[rank {n}]: {w} {n}" for n in (0, 1)
                                  for w in ("apple,pie", "orange")]), out
    assert sorted(err) == ["[rank 0]: boom 0", "[rank 1]: boom 1"], err
    assert "pear 0" in r.stdout, "the console still gets every line"
