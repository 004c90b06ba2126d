"""The single-node launcher, driven as a user would: the built binary and real processes."""
import json
import os
import re
import shutil
import signal
import sys

import pytest

from conftest import WORKER, env_lines, processes_with_marker, read_until, wait_until, worker


def test_every_rank_gets_torch_environment(jobs):
    r = jobs.run(["--nproc-per-node", 3, "--rdzv-id", "job42", "--", *worker("env")])
    assert r.returncode == 0, r.stderr
    envs = env_lines(r.stdout)
    assert sorted(envs) == [0, 1, 2]
    ports = {e["MASTER_PORT"] for e in envs.values()}
    assert len(ports) == 1, "every rank must get the same MASTER_PORT"
    for rank, e in envs.items():
        assert e["RANK"] == str(rank)
        assert e["LOCAL_RANK"] == str(rank)
        assert e["WORLD_SIZE"] == "3"
        assert e["LOCAL_WORLD_SIZE"] == "3"
        assert e["NODE_RANK"] == "0" and e["GROUP_RANK"] == "0"
        assert e["GROUP_WORLD_SIZE"] == "1"
        assert e["ROLE_RANK"] == str(rank) and e["ROLE_WORLD_SIZE"] == "3"
        assert e["ROLE_NAME"] == "default"
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["TORCHELASTIC_RUN_ID"] == "job42"
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert e["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert e["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert e["OMP_NUM_THREADS"] == "1"
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert e["DDPLAUNCH_TEST_MARKER"] == jobs.marker, "the rest is inherited"
    assert r.stderr.count("OMP_NUM_THREADS") == 1, "said once"


def test_worker_port_and_free_port(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--worker-port", 23456, "--", *worker("env")])
    assert {e["MASTER_PORT"] for e in env_lines(r.stdout).values()} == {"23456"}
    # Without --worker-port the port is picked per job, not the fixed 29500.
    ports = set()
    for _ in range(3):
        r = jobs.run(["--", *worker("env")])
        ports |= {e["MASTER_PORT"] for e in env_lines(r.stdout).values()}
    assert len(ports) > 1


def test_user_environment_wins_for_omp(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("env")], env={"OMP_NUM_THREADS": "6"})
    assert {e["OMP_NUM_THREADS"] for e in env_lines(r.stdout).values()} == {"6"}
    assert "OMP_NUM_THREADS" not in r.stderr


def test_failure_stops_everyone_with_root_cause_exit_code(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 4, "--summary-json", tmp_path / "s.json", "--",
                  *worker("@2:err=something broke", "@2:exit=7", "sleep=300")])
    assert r.returncode == 7, r.stderr
    assert "job failed: rank 2 (node 0, local rank 2" in r.stderr
    assert "exited with exit code 7" in r.stderr
    assert "  | something broke" in r.stderr
    assert r.stderr.count("after ddplaunch stopped it") == 3
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["exit_code"] == 7
    assert summary["root_cause"]["rank"] == 2
    assert summary["root_cause"]["last_stderr"] == ["something broke"]
    states = {r["rank"]: (r["state"], r["signal_name"] if r["state"] == "signaled" else r["exit_code"])
              for r in summary["ranks"]}
    assert states == {0: ("signaled", "SIGTERM"), 1: ("signaled", "SIGTERM"),
                      2: ("failed", 7), 3: ("signaled", "SIGTERM")}
    assert all(r["pid"] > 0 and r["end_time"] >= r["start_time"] > 0 for r in summary["ranks"])
    assert summary["launcher_max_rss_kib"] > 0


def test_death_by_signal_is_128_plus_n(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("@1:kill=SEGV", "sleep=300")])
    assert r.returncode == 128 + signal.SIGSEGV
    assert "killed by signal SIGSEGV (11)" in r.stderr


def test_success_waits_for_every_rank(jobs):
    r = jobs.run(["--nproc-per-node", 3, "--", *worker("@0:sleep=0.5", "out=done")])
    assert r.returncode == 0
    assert sorted(r.stdout.splitlines()) == [f"[rank {i}]: done" for i in range(3)]
    assert r.stderr.count("job failed") == 0


def test_missing_program_is_127_with_clear_message(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", "no-such-program-xyz", "a"])
    assert r.returncode == 127
    assert r.stderr.strip().splitlines()[-1].startswith(
        "ddplaunch: error: cannot execute 'no-such-program-xyz'")


def test_program_without_permission_is_127(jobs, tmp_path):
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    os.chmod(script, 0o644)
    r = jobs.run(["--nproc-per-node", 2, "--", script])
    assert r.returncode == 127
    assert f"cannot execute '{script}': Permission denied" in r.stderr


@pytest.mark.parametrize("args,fragment", [
    (["--bogus", "x"], "unknown option '--bogus'"),
    (["--nproc-per-node", "lots", "x"], "--nproc-per-node"),
    (["--nnodes", "2", "--node-rank", "5", "x"], "--node-rank 5 is out of range"),
    (["--master-port", "99999", "x"], "--master-port"),
    ([], "no program given"),
])
def test_bad_usage_is_one_line_and_exit_2(jobs, args, fragment):
    r = jobs.run(args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddplaunch: error:") and fragment in lines[0], r.stderr


def test_help_and_version(jobs):
    r = jobs.run(["--help"])
    assert r.returncode == 0 and "--nproc-per-node" in r.stdout and "Output" in r.stdout
    r = jobs.run(["--version"])
    assert r.returncode == 0 and r.stdout.startswith("ddplaunch ")


def test_help_fits_100_columns_names_every_value_and_lists_commands_and_exit_codes(jobs):
    out = jobs.run(["--help"]).stdout
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert " TEXT" not in out, "every option's value has a name of its own"
    assert "--nnodes N|MIN:MAX" in out and "--hang-timeout SECONDS" in out, out
    assert "--preempt-signal SIG" in out and "--summary-json FILE" in out, out
    assert "--nproc_per_node" not in out, "torchrun's underscore spellings are accepted, not listed"
    for command in ("ddplaunch check", "ddplaunch status", "ddplaunch stacks", "ddplaunch store",
                    "ddplaunch token"):
        assert command in out, out
    codes = out[out.index("Exit status:"):]
    for code in ("0", "1", "2", "3", "4", "5", "75", "93", "127", "128+N"):
        assert re.search(rf"^  {re.escape(code)} ", codes, re.M), codes
    # A wrapped description never starts a line with an option's name.
    assert not re.search(r"^ {20,}-", out, re.M), out


def test_gpu_mode_without_gpus_is_a_usage_error(jobs):
    if os.path.isdir("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus"):
        pytest.skip("this machine has NVIDIA GPUs")
    env = {"CUDA_VISIBLE_DEVICES": ""}
    r = jobs.run(["--nproc-per-node", "gpu", "--", *worker()], env=env)
    assert r.returncode == 2 and "--nproc-per-node gpu" in r.stderr
    r = jobs.run(["--nproc-per-node", "gpu", "--", *worker("env")], env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode == 0 and len(env_lines(r.stdout)) == 2


def test_cpu_mode_counts_online_cpus(jobs):
    r = jobs.run(["--nproc-per-node", "cpu", "--dry-run", "--", *worker()])
    assert json.loads(r.stdout)["config"]["nproc_per_node"] == os.cpu_count()


def test_dry_run_prints_json_and_launches_nothing(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 2, "--dry-run", "--worker-port", 4444, "--",
                  *worker(f"pidfile={tmp_path}")])
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert [w["rank"] for w in doc["workers"]] == [0, 1]
    assert doc["workers"][1]["env"]["RANK"] == "1"
    assert doc["workers"][1]["env"]["MASTER_PORT"] == "4444"
    assert doc["workers"][0]["stdin"] == "inherited" and doc["workers"][1]["stdin"] == "/dev/null"
    assert doc["workers"][0]["argv"] == [WORKER, f"pidfile={tmp_path}"]
    assert not [p for p in os.listdir(tmp_path) if p.isdigit()], "nothing was launched"


def test_torchrun_pet_variables_are_option_defaults(jobs):
    # What Kubeflow's PyTorchJob sets for torchrun; a flag on the command line wins.
    pet = {"PET_NPROC_PER_NODE": "3", "PET_NNODES": "2", "PET_NODE_RANK": "1",
           "PET_MASTER_ADDR": "10.1.2.3", "PET_MASTER_PORT": "23456", "PET_RDZV_ID": "job7"}
    r = jobs.run(["--dry-run", "--", "true"], env=pet)
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)["config"]
    assert (config["nproc_per_node"], config["nnodes"], config["node_rank"]) == (3, 2, 1)
    assert (config["master_addr"], config["master_port"], config["rdzv_id"]) == ("10.1.2.3", 23456, "job7")
    r = jobs.run(["--nproc-per-node", 1, "--master_port", 30000, "--dry-run", "--", "true"], env=pet)
    config = json.loads(r.stdout)["config"]
    assert (config["nproc_per_node"], config["master_port"], config["nnodes"]) == (1, 30000, 2)


@pytest.mark.parametrize("env,fragment", [
    ({"PET_NNODES": "many"}, "got 'many' (set by $PET_NNODES; fix or unset it)"),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "5"}, "(set by $PET_NNODES, $PET_NODE_RANK; fix or unset it)"),
    ({"PET_MASTER_PORT": "0"}, "--master-port"),
])
def test_bad_pet_variable_is_named_in_the_usage_error(jobs, env, fragment):
    r = jobs.run(["--", "true"], env=env)
    assert r.returncode == 2
    assert fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "$PET_" in r.stderr


def test_python_scripts_and_modules(jobs, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import os, sys\nprint('py', os.environ['RANK'], sys.argv[1:], flush=True)\n")
    r = jobs.run(["--nproc-per-node", 2, "--python", sys.executable, "--", script, "a", "b"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[rank 0]: py 0 ['a', 'b']", "[rank 1]: py 1 ['a', 'b']"]
    (tmp_path / "hellomod.py").write_text("import os\nprint('mod', os.environ['RANK'])\n")
    r = jobs.run(["-m", "--python", sys.executable, "hellomod"], env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0 and r.stdout == "[rank 0]: mod 0\n", r.stderr
    r = jobs.run(["--", "hellomod.py"], env={"PYTHON_EXEC": sys.executable}, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "[rank 0]: mod 0\n", r.stderr


def test_workers_inherit_only_stdio(jobs):
    r_fd, w_fd = os.pipe()
    os.set_inheritable(r_fd, True)
    try:
        r = jobs.run(["--nproc-per-node", 2, "--", *worker("fds")], pass_fds=(r_fd,), close_fds=True)
    finally:
        os.close(r_fd)
        os.close(w_fd)
    assert sorted(r.stdout.splitlines()) == ["[rank 0]: fds 0 1 2", "[rank 1]: fds 0 1 2"]


def test_many_workers_each_get_their_own_streams_and_outlive_their_start(jobs, tmp_path):
    # From eight workers on, two threads start them, each through its own fd
    # slots (docs/ARCHITECTURE.md): every worker must still get its own stdout
    # and stderr, only fds 0-2, and stdin for rank 0 alone; and the workers the
    # second thread started must live on while it idles (PR_SET_PDEATHSIG
    # follows the thread that started a worker).
    n = 12
    go = tmp_path / "go"
    (tmp_path / "stdin").write_text("hello\n")
    with open(tmp_path / "stdin") as stdin:
        p = jobs.start(["--nproc-per-node", n, "--", *worker("seq=1", "seqerr=1", "fds", "cat",
                                                              f"ready={tmp_path}", f"waitfile={go}",
                                                              "out=bye")],
                       stdin=stdin)
    assert wait_until(ready_files(tmp_path, n))
    assert len(processes_with_marker(jobs.marker)) == n + 2  # the launcher, its guard, the workers
    go.touch()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    for rank in range(n):
        mine = [l.split(": ", 1)[1] for l in out.splitlines() if l.startswith(f"[rank {rank}]: ")]
        assert mine == [f"{rank}:0", "fds 0 1 2", *(["hello"] if rank == 0 else []), "bye"], (rank, out)
        assert f"[rank {rank}]: {rank}:0" in err.splitlines(), (rank, err)


def test_workers_get_default_sigpipe_and_keep_inherited_ignores(jobs):
    # The launcher ignores SIGPIPE for itself; workers must not inherit that, or a
    # worker piping into `head` would never die. A SIGHUP ignored by the user's
    # shell (nohup) stays ignored, as exec would leave it.
    def ignore_hup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    r = jobs.run(["--nproc-per-node", 2, "--no-prefix", "--", "grep", "^SigIgn", "/proc/self/status"],
                 preexec_fn=ignore_hup)
    assert r.returncode == 0, r.stderr
    masks = [int(line.split()[1], 16) for line in r.stdout.splitlines()]
    assert len(masks) == 2
    for mask in masks:
        assert mask & (1 << (signal.SIGHUP - 1)), "inherited SIG_IGN for SIGHUP was reset"
        assert not mask & (1 << (signal.SIGPIPE - 1)), "the launcher's SIG_IGN for SIGPIPE leaked"


def test_stdin_goes_to_local_rank_zero_only(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("cat", "out=eof")], input="hello\nworld\n")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert [l for l in lines if l.startswith("[rank 0]")] == [
        "[rank 0]: hello", "[rank 0]: world", "[rank 0]: eof"]
    assert [l for l in lines if l.startswith("[rank 1]")] == ["[rank 1]: eof"]


def test_grace_period_then_sigkill_for_workers_ignoring_sigterm(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 2, "--term-timeout", 1, "--",
                  *worker("@1:ignore-term", f"ready={tmp_path}", "@0:waitfile=" + str(tmp_path / "ready.1"),
                          "@0:exit=3", "sleep=300")])
    assert r.returncode == 3
    assert "rank 1 (node 0, local rank 1" in r.stderr and "SIGKILL" in r.stderr
    assert "still running 1 s after SIGTERM" in r.stderr


def ready_files(tmp_path, n):
    return lambda: len([p for p in os.listdir(tmp_path) if p.startswith("ready.")]) == n


def ignore_background_signals():
    """What a shell does for `ddplaunch ... &` in a script (no job control)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_stop_signals_are_forwarded_and_end_the_job(jobs, tmp_path, sig, background):
    # In the background a shell starts the launcher with SIGINT and SIGQUIT
    # ignored; `kill -INT` must still stop the workers at once, not after
    # the 600 s grace period.
    p = jobs.start(["--nproc-per-node", 2, "--term-timeout", 600, "--",
                    *worker(f"ready={tmp_path}", "sleep=300")],
                   preexec_fn=ignore_background_signals if background else None)
    assert wait_until(ready_files(tmp_path, 2))
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig
    assert f"job stopped: ddplaunch received {signal.Signals(sig).name}" in err
    assert err.count(f"killed by signal {signal.Signals(sig).name}") == 2


def test_second_interrupt_kills_at_once(jobs, tmp_path):
    p = jobs.start(["--nproc-per-node", 2, "--term-timeout", 600, "--",
                    *worker("trap=INT", f"ready={tmp_path}", "sleep=300")])
    assert wait_until(ready_files(tmp_path, 2))
    p.send_signal(signal.SIGINT)
    assert "stopping the workers" in read_until(p.stderr, "stopping the workers")[-1]
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)  # far less than --term-timeout 600
    assert p.returncode == 130
    assert err.count("killed by signal SIGKILL") == 2, err


def test_user_signals_are_forwarded_and_the_job_goes_on(jobs, tmp_path):
    go = tmp_path / "go"
    p = jobs.start(["--nproc-per-node", 2, "--", *worker(
        "trap=USR1", "trap=USR2", f"ready={tmp_path}", f"waitfile={go}", "out=finished")])
    assert wait_until(ready_files(tmp_path, 2))
    p.send_signal(signal.SIGUSR1)
    p.send_signal(signal.SIGUSR2)
    # Await both ranks reporting the signals before letting them finish.
    lines = []
    while len([l for l in lines if "caught" in l]) < 4:
        line = p.stdout.readline()
        assert line, f"the launcher ended before both ranks caught both signals: {lines}"
        lines.append(line.strip())
    go.write_text("")
    out, err = p.communicate(timeout=60)
    lines += out.splitlines()
    assert p.returncode == 0, err
    for rank in (0, 1):
        assert f"[rank {rank}]: caught SIGUSR1" in lines
        assert f"[rank {rank}]: caught SIGUSR2" in lines
        assert f"[rank {rank}]: finished" in lines


def test_nohup_job_survives_a_hangup(jobs, tmp_path):
    # nohup ignores SIGHUP: the launcher and its workers keep ignoring it.
    go = tmp_path / "go"
    p = jobs.start(["--nproc-per-node", 2, "--", *worker(
        "trap=USR1", f"ready={tmp_path}", f"waitfile={go}", "out=finished")],
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert wait_until(ready_files(tmp_path, 2))
    p.send_signal(signal.SIGHUP)
    p.send_signal(signal.SIGUSR1)  # handled after the SIGHUP would have been
    lines = read_until(p.stdout, "caught SIGUSR1")
    assert lines and "caught SIGUSR1" in lines[-1], lines
    go.write_text("")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "SIGHUP" not in err
    assert sorted(l for l in (lines + out.splitlines()) if "finished" in l) == [
        "[rank 0]: finished", "[rank 1]: finished"]


def test_launcher_killed_takes_its_workers_with_it(jobs, tmp_path):
    p = jobs.start(["--nproc-per-node", 3, "--", *worker(f"ready={tmp_path}", "sleep=300")])
    assert wait_until(ready_files(tmp_path, 3))
    assert len(processes_with_marker(jobs.marker)) == 5  # the launcher, its guard, three workers
    p.kill()
    p.wait()
    assert wait_until(lambda: not processes_with_marker(jobs.marker), timeout=10)


def test_grandchildren_are_not_left_behind(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("grandchild", "escape", "out=bye")])
    assert r.returncode == 0
    pids = [int(l.split()[-1]) for l in r.stdout.splitlines() if "grandchild" in l or "escape" in l]
    assert len(pids) == 4
    # the jobs fixture asserts no process of the job is alive


def test_grandchildren_are_stopped_when_a_rank_fails(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("grandchild", "escape", "@0:exit=5", "sleep=300")])
    assert r.returncode == 5


def test_dry_run_says_where_each_value_came_from(jobs):
    env = {"PET_NPROC_PER_NODE": "3", "PET_MASTER_ADDR": "10.1.2.3"}
    r = jobs.run(["--nnodes", 2, "--dry-run", "--", "true"], env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["sources"]["nnodes"] == "flag"
    assert doc["sources"]["nproc_per_node"] == "PET_NPROC_PER_NODE"
    assert doc["sources"]["master_addr"] == "PET_MASTER_ADDR"
    assert doc["sources"]["master_port"] == "default"
    # With more than one node, ranks and the workers' port are only known at rendezvous.
    assert {"node_rank", "RANK", "WORLD_SIZE", "MASTER_PORT"} <= set(doc["placeholders"])
    assert doc["topology"]["world_size"] == 6
    assert [n["first_rank"] for n in doc["topology"]["nodes"]] == [0, 3]
    one = json.loads(jobs.run(["--dry-run", "--worker-port", 4444, "--", "true"]).stdout)
    assert set(one["placeholders"]) == {"TORCHELASTIC_ERROR_FILE"}, \
        "one node with a given port: only the error files, made at start, are placeholders"


def test_a_missing_module_names_the_python_that_ran_and_points_to_python_flag(jobs, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import no_such_module_of_yours\n")
    r = jobs.run(["--nproc-per-node", 2, "--", script])
    assert r.returncode == 1, r.stderr
    ran = os.path.realpath(shutil.which("python3", path=jobs.env()["PATH"]))
    assert f"the ranks ran {ran} (the first python3 on PATH)" in r.stderr, r.stderr
    assert "--python /path/to/python" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1] == "ddplaunch: exit code 1", r.stderr
    r = jobs.run(["--python", sys.executable, "--nproc-per-node", 1, "--", script])
    assert "the ranks ran" not in r.stderr, "--python was given"
