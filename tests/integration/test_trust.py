"""The store admits only the job: with a token (DDPLAUNCH_RDZV_TOKEN or
--rdzv-token-file) a node or a stranger without it gets nothing done, the
job goes on, and node 0 says once who was refused. A port held by another
program is named at once."""
import json
import os
import socket
import struct
import subprocess
import threading

import pytest

import netns

from conftest import BIN, free_port, wait_until, worker

TOKEN = {"DDPLAUNCH_RDZV_TOKEN": "correct horse battery staple"}
PROTOCOL_VERSION = 7  # the store protocol (docs/PROTOCOL.md)


def node(jobs, rank, port, args, env=None, nnodes=2):
    return jobs.start(["--nnodes", nnodes, "--node-rank", rank, "--master-port", port,
                       "--rdzv-timeout", 60, *args], env=env)


def frame(body):
    return struct.pack(">I", len(body)) + body


def text(s):
    return struct.pack(">I", len(s)) + s


def request(op, request_id, fields):
    """A request after HELLO: u8 op, u32 id (its reply repeats it), fields."""
    return frame(bytes([op]) + struct.pack(">I", request_id) + fields)


def test_nodes_with_the_same_token_form_the_job_and_workers_never_see_it(jobs):
    port = free_port()
    procs = [node(jobs, n, port, ["--", *worker("env")], env=TOKEN) for n in (1, 0)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert "DDPLAUNCH_RDZV_TOKEN" not in out and TOKEN["DDPLAUNCH_RDZV_TOKEN"] not in out


def test_a_node_with_the_wrong_token_is_refused_and_the_job_goes_on(jobs, tmp_path):
    port = free_port()
    host = node(jobs, 0, port, ["--", *worker()], env=TOKEN)
    wrong = tmp_path / "token"
    wrong.write_text("not the secret\n")
    wrong.chmod(0o600)
    intruder = node(jobs, 1, port, ["--rdzv-token-file", wrong, "--", *worker()])
    out, err = intruder.communicate(timeout=60)
    assert intruder.returncode == 3, err
    errors = [l for l in err.splitlines() if "error" in l]
    assert len(errors) == 1 and "does not know this job's token" in errors[0], err
    # The real node 1 still joins, and the job succeeds.
    real = node(jobs, 1, port, ["--", *worker()], env=TOKEN)
    assert real.wait(timeout=60) == 0
    out, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    refusals = [l for l in err.splitlines() if "the store refused 127.0.0.1:" in l]
    assert len(refusals) == 1 and "without this job's token" in refusals[0], err


def test_a_stranger_cannot_stop_the_job(jobs, tmp_path):
    port = free_port()
    args = ["--nproc-per-node", 1, "--", *worker(f"ready={tmp_path}", f"waitfile={tmp_path}/go")]
    procs = [node(jobs, n, port, args, env=TOKEN) for n in (1, 0)]
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 2, timeout=60)
    # A stranger speaks the protocol: HELLO, then a forged stop verdict.
    s = socket.create_connection(("127.0.0.1", port))
    hello = frame(b"\x00" + struct.pack(">IH", 0x44444C31, PROTOCOL_VERSION) + text(os.urandom(32)))
    forged = request(1, 1, text(b"job/stop") + text(b'{"exit_code":0,"message":"forged"}'))
    s.sendall(hello + forged)
    replies = b""
    while chunk := s.recv(4096):
        replies += chunk
    assert b"admits only the job's nodes" in replies
    (tmp_path / "go").write_text("")
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert "forged" not in err


def test_a_port_held_by_another_program_is_named(jobs):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def banner():
        conn, _ = listener.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
        conn.recv(1024)
        conn.close()

    t = threading.Thread(target=banner, daemon=True)
    t.start()
    p = node(jobs, 1, port, ["--", *worker()])
    out, err = p.communicate(timeout=60)
    listener.close()
    assert p.returncode == 3, err
    assert "not a ddplaunch store" in err and f"port {port}" in err, err


def test_an_unreadable_token_file_is_a_usage_error(jobs, tmp_path):
    r = jobs.run(["--nnodes", 2, "--rdzv-token-file", tmp_path / "missing", "--", *worker()])
    assert r.returncode == 2
    assert "--rdzv-token-file" in r.stderr and "cannot read it" in r.stderr


@pytest.mark.parametrize("kind", ["directory", "device", "fifo", "large", "empty"])
def test_a_token_file_that_is_no_secret_is_a_usage_error_for_nodes_and_the_store_cli(
        jobs, tmp_path, kind):
    """Only a regular file of at most 4 KiB is read: a directory, /dev/zero
    (which would be read without end), a FIFO (which would block) or a big
    file is one clear line and exit 2, never an internal error."""
    path = {"directory": tmp_path, "device": "/dev/zero", "fifo": tmp_path / "fifo",
            "large": tmp_path / "large", "empty": tmp_path / "empty"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "large":
        path.write_bytes(b"x" * 5000)
        path.chmod(0o600)
    elif kind == "empty":
        path.write_text("\n")
        path.chmod(0o600)
    want = {"directory": "is a directory", "device": "is a device", "fifo": "is a FIFO",
            "large": "holds 5000 bytes", "empty": "is empty"}[kind]
    r = jobs.run(["--nnodes", 2, "--rdzv-token-file", path, "--", *worker()], timeout=30)
    assert r.returncode == 2, r.stderr
    assert f"--rdzv-token-file {path} {want}" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    s = subprocess.run([BIN, "store", "get", "k", "--addr", "127.0.0.1", "--port", "1",
                        "--token-file", str(path)], capture_output=True, text=True, timeout=30)
    assert s.returncode == 2, s.stderr
    assert f"store --token-file {path} {want}" in s.stderr, s.stderr


def test_a_token_file_others_can_read_is_a_warning_or_with_strict_token_an_error(jobs, tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o644)
    strict = jobs.run(["--nnodes", 2, "--strict-token", "--rdzv-token-file", token,
                       "--", *worker()], timeout=30)
    assert strict.returncode == 2, strict.stderr
    assert "can be read or written by other users (--strict-token): chmod 600 it" in strict.stderr
    lax = jobs.run(["--nnodes", 1, "--rdzv-token-file", token, "--", *worker()], timeout=30)
    assert lax.returncode == 0, lax.stderr
    assert "can be read or written by other users: chmod 600 it" in lax.stderr


def test_node_0s_timeout_names_the_node_its_store_refused(jobs, tmp_path):
    """Node 1 has no token (it says nothing of a store it does not host), so
    node 0's store refuses it; node 0's timeout names that host and says
    what to give it, not "start ddplaunch on the missing nodes"."""
    port = free_port()
    host = jobs.start(["--nnodes", 2, "--node-rank", 0, "--master-port", port,
                       "--rdzv-timeout", 3, "--", *worker()], env=TOKEN)
    member = node(jobs, 1, port, ["--", *worker()])
    out, err = host.communicate(timeout=60)
    assert host.returncode == 3, err
    assert "the store refused 127.0.0.1 (a client without this job's token" in err, err
    assert "start ddplaunch on the missing nodes" not in err, err
    out, err = member.communicate(timeout=60)
    assert "the store admits any client" not in err, err


@pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
def test_without_a_token_a_job_across_hosts_is_told_how_to_set_one(jobs, hosts):
    """Node 0, hosting the store on an address other hosts reach, says so."""
    argv = hosts.command("node0", [BIN, "--nnodes", 2, "--node-rank", 0, "--master-addr", "node0",
                                   "--rdzv-timeout", "0.5", "--", *worker()])
    r = subprocess.run(argv, env=jobs.env(), capture_output=True, text=True, timeout=60)
    assert "the store admits any client that can reach node0:" in r.stderr, r.stderr
    assert "--rdzv-token-file" in r.stderr and "DDPLAUNCH_RDZV_TOKEN" in r.stderr, r.stderr


def test_the_connection_cap_never_refuses_the_jobs_own_nodes(jobs):
    # Each agent holds one connection: a cap below one per node (here 4 for
    # 6 nodes, as the default 4,096 is for 5,000) is raised to fit.
    port = free_port()
    procs = [node(jobs, n, port, ["--rdzv-max-clients", 4, "--", "true"], nnodes=6) for n in range(6)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err


class StoreClient:
    """The store protocol from outside the job: what a stranger on the network
    can send to a store without a token."""

    def __init__(self, port):
        def connect():
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=30)
            except ConnectionRefusedError:
                return None  # node 0 is not listening yet

        self.s = wait_until(connect, timeout=60)
        self.s.sendall(frame(b"\x00" + struct.pack(">IH", 0x44444C31, PROTOCOL_VERSION) + text(os.urandom(32))))
        assert self._reply()[0] == 0  # HELLO's answer: no id
        self.next_id = 1

    def _reply(self):
        (size,) = struct.unpack(">I", self._read(4))
        return self._read(size)

    def call(self, body):
        request_id, self.next_id = self.next_id, self.next_id + 1
        self.s.sendall(request(body[0], request_id, body[1:]))
        reply = self._reply()
        assert struct.unpack(">I", reply[:4])[0] == request_id, reply
        assert reply[4] == 0, reply
        return reply[5:]

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.s.recv(n - len(data))
            assert chunk, "the store closed the connection"
            data += chunk
        return data

    def set(self, key, value):
        self.call(b"\x01" + text(key) + text(value))

    def get(self, key):
        value = self.call(b"\x02" + text(key) + struct.pack(">I", 10000))
        return value[4:4 + struct.unpack(">I", value[:4])[0]]

    def add(self, key, delta):
        return struct.unpack(">q", self.call(b"\x03" + text(key) + struct.pack(">q", delta)))[0]


def test_a_forged_plan_is_an_error_naming_it_not_a_crash(jobs):
    # Node 0 waits for a third node; a stranger publishes a plan whose sizes
    # give node 1 five workers where it starts one.
    port = free_port()
    host = node(jobs, 0, port, ["--", *worker()], nnodes=3)
    member = node(jobs, 1, port, ["--nproc-per-node", 1, "--", *worker()], nnodes=3)
    stranger = StoreClient(port)
    assert wait_until(lambda: stranger.add(b"rdzv/arrivals", 0) == 2, timeout=60)
    arrival = next(a for a in (0, 1) if json.loads(stranger.get(f"rdzv/node/{a}".encode()))["node_rank"] == 1)
    stranger.set(f"rdzv/plan/{arrival}".encode(), b'{"node_rank": 1}')
    stranger.set(b"rdzv/plan", b'{"ok": true, "topology": {"world_size": 15, "master_addr": "x", '
                 b'"master_port": 1, "sizes": [[5, 3]]}}')
    out, err = member.communicate(timeout=60)
    assert member.returncode == 3, err
    assert f"malformed plan (rdzv/plan/{arrival})" in err and "5 workers, this node starts 1" in err, err
    host.terminate()
    host.communicate(timeout=60)


def test_the_workers_credential_is_not_the_jobs_key(jobs, tmp_path):
    """A worker holds only DDPLAUNCH_STORE_TOKEN: with --prefix '' it can
    neither read the launcher's records nor forge a verdict, and an agent
    given that credential as its token is not admitted as a node."""
    import hashlib
    import hmac
    port = free_port()
    script = (f'{BIN} store --prefix "" get rdzv/node/0 --timeout 5; echo "read=$?"; '
              f'{BIN} store --prefix "" set job/0/stop forged; echo "forge=$?"; '
              f'{BIN} store set mine 1 && echo "own=$?"; '
              f'while [ ! -e {tmp_path}/go ]; do sleep 0.05; done')
    procs = [node(jobs, n, port, ["--nproc-per-node", 1, "--", "sh", "-c", script], env=TOKEN)
             for n in (0, 1)]
    credential = hmac.new(TOKEN["DDPLAUNCH_RDZV_TOKEN"].encode(), b"ddplaunch worker credential",
                          hashlib.sha256).hexdigest()
    impostor = jobs.run(["--nnodes", 3, "--node-rank", 2, "--master-port", port, "--rdzv-timeout", 10,
                         "--", "true"], env={"DDPLAUNCH_RDZV_TOKEN": credential}, timeout=60)
    assert impostor.returncode in (3, 4), impostor.stderr
    assert "the workers' credential may not write" in impostor.stderr, impostor.stderr
    (tmp_path / "go").write_text("")
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert "read=3" in out and "forge=3" in out and "own=0" in out, out + err
        assert "may not read rdzv/node/0" in out + err and "may not write job/0/stop" in out + err


def test_the_users_token_file_secures_a_job_with_nothing_typed(jobs, tmp_path):
    """`ddplaunch token init` writes a 0600 secret in the user's configuration
    directory; a multi-node job then uses it with no flag, and a node without
    it is refused."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": ""}
    made = subprocess.run([BIN, "token", "init"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    path = home / ".config" / "ddplaunch" / "token"
    assert path.stat().st_mode & 0o777 == 0o600
    assert str(path) in made.stdout
    again = subprocess.run([BIN, "token", "init"], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=30)
    assert again.returncode == 2 and "--force" in again.stderr, again.stderr
    port = free_port()
    # The job's workers wait for "go" so the store is still up when the stranger comes.
    go = tmp_path / "go"
    args = ["--nproc-per-node", 1, "--", *worker("env", f"waitfile={go}")]
    procs = [node(jobs, n, port, args, env=env) for n in (0, 1)]
    stranger = node(jobs, 1, port, ["--nproc-per-node", 1, "--", "true"],
                    env={"HOME": str(tmp_path / "elsewhere"), "XDG_CONFIG_HOME": ""})
    out, err = stranger.communicate(timeout=60)
    go.write_text("")
    assert stranger.returncode == 3 and "admits only its job's nodes" in err, err
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert json.loads(out.split("]: ", 1)[1].splitlines()[0]).get("DDPLAUNCH_STORE_TOKEN"), out
        assert path.read_text().strip() not in out, "the token itself reaches no worker"
