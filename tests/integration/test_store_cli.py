"""`ddplaunch store`: the job's store from a worker's shell. Every subcommand
against a live job, binary values, timeouts, the job-scoped prefix, a wrong
credential and no store at all, each with its documented exit status."""
import json
import os
import shutil
import subprocess

from conftest import BIN, SOURCE_DIR, free_port, read_until

STORE = f"{BIN} store"


def in_job(jobs, script, nproc=1, extra=(), timeout=60):
    """Runs `script` (sh) as every worker of a one-node job; its result."""
    return jobs.run(["--nproc-per-node", nproc, "--no-prefix", *extra, "--", "sh", "-c", script],
                    timeout=timeout)


def test_every_subcommand_in_a_live_job(jobs):
    script = f"""
        set -u
        {STORE} set greeting "hello world"; echo "set=$?"
        printf 'a\\000b\\377' | {STORE} set blob; echo "stdin=$?"
        {STORE} get blob | od -An -c | tr -s ' '
        echo "get=$({STORE} get greeting)"
        echo "add=$({STORE} add n 5) $({STORE} add n -2)"
        {STORE} cas greeting "hello world" swapped; echo " cas=$?"
        {STORE} cas greeting wrong other; echo " cas_miss=$?"
        {STORE} delete n; echo "delete=$?"
        {STORE} delete n; echo "delete_again=$?"
        {STORE} check greeting blob; echo "check=$?"
        {STORE} check greeting nothing; echo "check_miss=$?"
        {STORE} get nothing --timeout 0.2; echo "get_timeout=$?"
        {STORE} wait greeting nothing --timeout 0.2; echo "wait_timeout=$?"
        echo "keys=$({STORE} keys | tr '\\n' ,)"
        echo "num=$({STORE} num-keys)"
    """
    r = in_job(jobs, script)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for expected in ["set=0", "stdin=0", " a \\0 b 377", "get=hello world", "add=5 3",
                     "swapped cas=0", "swapped cas_miss=1", "delete=0", "delete_again=1",
                     "check=0", "check_miss=1", "get_timeout=1", "wait_timeout=1",
                     "keys=blob,greeting,", "num=2"]:
        assert expected in out, (expected, out, r.stderr)
    assert "nothing does not exist after 0.2 s" in r.stderr


def test_get_blocks_until_another_rank_sets_the_key(jobs):
    script = f"""
        if [ "$RANK" = 0 ]; then {STORE} get ready --timeout 30 && echo " got it"
        else sleep 0.3; {STORE} set ready now; fi
    """
    r = in_job(jobs, script, nproc=2)
    assert r.returncode == 0, r.stderr
    assert "now got it" in r.stdout


def test_workers_keys_cannot_touch_the_launchers(jobs):
    # A script that sets rdzv/plan sets user/rdzv/plan: the job goes on.
    port = free_port()
    script = f"""
        {STORE} set rdzv/plan junk
        {STORE} set job/0/stop junk
        {STORE} --prefix '' keys | grep -c '^user/' | sed 's/^/user_keys=/'
        {STORE} --prefix '' keys | grep -q '^rdzv/arrivals$' && echo launcher_keys_listed
    """
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--master-port", port, "--no-prefix",
                         "--", "sh", "-c", script]) for n in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert "launcher_keys_listed" in out, (out, err)


def test_a_wrong_credential_or_no_store_is_exit_3(jobs, tmp_path):
    wrong = tmp_path / "token"
    wrong.write_text("not the job's\n")
    r = in_job(jobs, f"{STORE} --token-file {wrong} get x --timeout 1; echo rc=$?")
    assert "rc=3" in r.stdout, (r.stdout, r.stderr)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPLAUNCH_STORE")}
    r = subprocess.run([BIN, "store", "--addr", "127.0.0.1", "--port", str(free_port()),
                        "get", "x"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "ddplaunch store:" in r.stderr


def test_outside_a_job_or_misused_is_a_usage_error():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPLAUNCH_STORE")}
    for args, fragment in [(["get", "x"], "run this inside a ddplaunch job"),
                           (["add", "x"], "store add takes KEY N"),
                           (["frobnicate"], "'frobnicate' is not a subcommand; the subcommands "
                                            "are set, get,"),
                           (["--port", "99999", "keys"], "--port 99999"),
                           (["get", "x", "--timeout", "-1"], "--timeout -1")]:
        r = subprocess.run([BIN, "store", *args], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert fragment in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)


def test_store_help_has_one_usage_line_and_names_the_credential_variable_as_one():
    r = subprocess.run([BIN, "store", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Usage:") == 1, r.stdout
    assert "the credential itself, in $DDPLAUNCH_STORE_TOKEN" in r.stdout, r.stdout


def test_the_shell_example_elects_one_writer_per_node_and_meets_at_a_barrier(jobs):
    """The example finds the launcher through DDPLAUNCH_EXE: ddplaunch is
    started by absolute path and is not on the workers' PATH."""
    assert shutil.which("ddplaunch", path=os.environ.get("PATH", "")) is None
    port = free_port()
    example = os.path.join(SOURCE_DIR, "examples", "store_barrier.sh")
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--nproc-per-node", 3, "--master-port",
                         port, "--", "sh", example]) for n in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out)
    both = "".join(outs)
    assert both.count("passed the barrier") == 6, both
    assert both.count("writes for node 0") == 1 and both.count("writes for node 1") == 1, both


def test_a_job_with_a_token_gives_its_workers_a_credential_of_their_own(jobs):
    token = "the-jobs-own-secret-0123456789"
    port = free_port()
    script = (f'{STORE} set "k$RANK" v && {STORE} wait k0 k1 --timeout 30 && echo stored; '
              f'env | grep -c "{token}" | sed "s/^/seen=/"; '
              f'test -n "$DDPLAUNCH_STORE_TOKEN" && echo has_credential')
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--master-port", port, "--no-prefix",
                         "--", "sh", "-c", script], env={"DDPLAUNCH_RDZV_TOKEN": token})
             for n in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert "stored" in out and "seen=0" in out and "has_credential" in out, (out, err)


def test_workers_get_the_launchers_own_path(jobs):
    r = jobs.run(["--nproc-per-node", 1, "--no-prefix", "--", "sh", "-c",
                  'echo "exe=$DDPLAUNCH_EXE"; "$DDPLAUNCH_EXE" store set k v && echo stored'])
    assert r.returncode == 0, r.stderr
    assert f"exe={os.path.realpath(BIN)}" in r.stdout, r.stdout
    assert "stored" in r.stdout, (r.stdout, r.stderr)


def test_a_worker_that_fills_the_store_is_refused_and_the_job_ends_as_it_would(jobs, tmp_path):
    """Two nodes: rank 1 writes values until node 0's store refuses it,
    which keeps its last eighth for the launcher's own keys; then rank 0
    asks `ddplaunch status` (every node's answer is written in that store)
    and both ranks end 0, and so does the job (a refused agent's write
    would fail its connection, and end the job)."""
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 1_000_000)
    crumb = tmp_path / "crumb"
    crumb.write_bytes(b"x" * 1_000)
    # Values of 1 MB until refused, then of 1 KB to the last kilobyte.
    script = f"""
        if [ "$RANK" = 1 ]; then
          i=0; while {STORE} set k$i - < {blob} 2>{tmp_path}/refusal; do i=$((i+1)); done
          echo "refused after $i: $(cat {tmp_path}/refusal)"
          j=0; while {STORE} set c$j - < {crumb} 2>/dev/null; do j=$((j+1)); done
          touch {tmp_path}/done
        else
          while [ ! -e {tmp_path}/done ]; do sleep 0.05; done
          {BIN} status --json > {tmp_path}/status.json; echo "status=$?"
        fi"""
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--master-port", port, "--no-prefix",
                         "--", "sh", "-c", script]) for n in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        outs.append(out)
    refused = [l for l in outs[1].splitlines() if l.startswith("refused after")]
    assert refused and "the store is full" in refused[0], outs
    assert "kept for the launcher's own keys" in refused[0], refused
    count = int(refused[0].split()[2].rstrip(":"))
    assert 440 <= count <= 470, refused  # 448 MiB of 512
    # `ddplaunch status` from a worker's shell: every node's answer fits.
    assert "status=0" in outs[0], outs[0]
    assert len(json.loads((tmp_path / "status.json").read_text())["ranks"]) == 2

