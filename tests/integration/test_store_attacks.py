"""What a hostile peer can do to a job's store once it has a token: every
frame after AUTH is sealed (a man in the middle cannot inject one), nothing
sent before AUTH costs node 0 more than a handshake's bytes, a flood of
unauthenticated connections delays a node but never refuses it, and failed
handshakes from many hosts cost a bounded number of warning lines."""
import contextlib
import json
import os
import resource
import select
import socket
import struct
import threading

from conftest import free_port, wait_until, worker

TOKEN = {"DDPLAUNCH_RDZV_TOKEN": "correct horse battery staple"}
PROTOCOL_VERSION = 7  # the store protocol (docs/PROTOCOL.md)


def node(jobs, rank, port, args, env=TOKEN, nnodes=2, master="127.0.0.1"):
    return jobs.start(["--nnodes", nnodes, "--node-rank", rank, "--master-addr", master,
                       "--master-port", port, "--rdzv-timeout", 60, *args], env=env)


def frame(body):
    return struct.pack(">I", len(body)) + body


def text(s):
    return struct.pack(">I", len(s)) + s


def hello():
    return frame(b"\x00" + struct.pack(">IH", 0x44444C31, PROTOCOL_VERSION) + text(os.urandom(32)))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


class Relay:
    """A man in the middle on 127.0.0.2: each connection a node makes is
    handed to pipe(client, server) with its own connection to the store on
    127.0.0.1, on a thread of its own; `connections` counts those made."""

    def __init__(self, store_port):
        self.store_port = store_port
        self.connections = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.2", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client):
        try:
            server = socket.create_connection(("127.0.0.1", self.store_port))
        except OSError:
            client.close()  # node 0 is not listening yet: the node retries
            return
        self.connections += 1
        try:
            self.pipe(client, server, self.connections)
        except OSError:
            return
        finally:
            client.close()
            server.close()


class InjectingRelay(Relay):
    """Passes a node's bytes to the store and back, and once told, injects
    a forged stop verdict (a CAS of job/0/stop) into the node's
    authenticated connection."""

    def __init__(self, store_port):
        self.inject = threading.Event()
        self.injected = threading.Event()
        super().__init__(store_port)

    def pipe(self, client, server, _):
        verdict = json.dumps({"exit_code": 77, "lost": -1, "message": "forged by the relay",
                              "node": 1, "root_cause": None}).encode()
        forged = frame(b"\x04" + struct.pack(">I", 999) + text(b"job/0/stop") + b"\x01" + text(b"")
                       + text(verdict))
        while True:
            ready, _, _ = select.select([client, server], [], [], 0.05)
            if self.inject.is_set() and not self.injected.is_set():
                server.sendall(forged)
                self.injected.set()
            for s in ready:
                data = s.recv(65536)
                if not data:
                    return
                (server if s is client else client).sendall(data)


def test_a_man_in_the_middle_cannot_inject_a_frame_after_the_handshake(jobs, tmp_path):
    """Node 1 reaches node 0's store through a relay that passes HELLO and
    AUTH through, then injects a stop verdict with exit code 77. The frame
    fails its check: the store closes that connection and says so, and no
    node exits with the attacker's code."""
    port = free_port()
    relay = InjectingRelay(port)
    args = ["--nproc-per-node", 1, "--", *worker(f"ready={tmp_path}", f"waitfile={tmp_path}/go")]
    host = node(jobs, 0, port, args)
    member = node(jobs, 1, relay.port, args, master="127.0.0.2")
    assert wait_until(lambda: len(list(tmp_path.glob("ready.*"))) == 2, timeout=60)
    relay.inject.set()
    assert relay.injected.wait(timeout=30)
    results = [p.communicate(timeout=120) + (p.returncode,) for p in (host, member)]
    (tmp_path / "go").write_text("")
    for out, err, rc in results:
        assert rc != 77 and "forged by the relay" not in err, err
    host_err = results[0][1]
    assert "failed its authentication check" in host_err, host_err
    assert results[0][2] == 4 and "node 1 (" in host_err and "was lost" in host_err, host_err


class FlippingRelay(Relay):
    """Passes a node's connections to the store and back, frame by frame,
    and flips one byte inside the `nth` frame (0: HELLO) going `way`
    ("request" or "reply") of the first connection that reaches the store
    alone."""

    def __init__(self, store_port, way, nth):
        self.way, self.nth = way, nth
        self.flipped = threading.Event()
        super().__init__(store_port)

    def pipe(self, client, server, connection):
        pending = {client: b"", server: b""}
        count = {client: 0, server: 0}
        flip_from = client if self.way == "request" else server
        while True:
            for s in select.select([client, server], [], [], 1)[0]:
                data = s.recv(65536)
                if not data:
                    return
                buf, out = pending[s] + data, b""
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                    end = 4 + struct.unpack(">I", buf[:4])[0]
                    f = bytearray(buf[:end])
                    if connection == 1 and s is flip_from and count[s] == self.nth:
                        f[4 + (end - 4) // 2] ^= 0x01
                        self.flipped.set()
                    count[s] += 1
                    out, buf = out + bytes(f), buf[end:]
                pending[s] = buf
                (server if s is client else client).sendall(out)


def _join_through_a_flipped_frame(jobs, tmp_path, way, nth):
    port = free_port()
    relay = FlippingRelay(port, way, nth)
    args = ["--nproc-per-node", 1, "--", *worker("env")]
    host = node(jobs, 0, port, args)
    member = node(jobs, 1, relay.port, args, master="127.0.0.2")
    results = [p.communicate(timeout=120) + (p.returncode,) for p in (host, member)]
    assert relay.flipped.is_set() and relay.connections >= 2
    for out, err, rc in results:
        assert rc == 0, err
        assert '"WORLD_SIZE":"2"' in out, out
    member_err = results[1][1]
    assert "closed this node's connection before it was part of the job" in member_err, member_err
    assert "joining again" in member_err, member_err
    return results


def test_a_request_changed_on_the_way_before_the_node_joined_is_sent_again(jobs, tmp_path):
    """A byte of node 1's ADD (its 4th frame: HELLO, AUTH, the verdict's
    GET, ADD) flips on the way: the store finds the frame forged and closes
    the connection. Node 1 is not part of the job yet, so it connects anew
    and joins; it used to end at once with exit 4 while node 0 waited."""
    results = _join_through_a_flipped_frame(jobs, tmp_path, "request", 3)
    assert "failed its authentication check" in results[0][1], results[0][1]


def test_a_reply_changed_on_the_way_before_the_node_joined_is_asked_again(jobs, tmp_path):
    """The store's answer to node 1's ADD (the 3rd reply: HELLO's, AUTH's,
    ADD's) flips on the way: node 1 finds it forged, so its arrival was
    counted but it does not know which. It connects anew, takes another
    and gives up the one without a record; node 0 passes over it."""
    _join_through_a_flipped_frame(jobs, tmp_path, "reply", 2)


def test_frames_sent_before_auth_cost_node_0_no_memory(jobs, tmp_path):
    """128 connections each announce a 2 MiB frame and send most of it
    before any handshake: node 0 keeps at most a handshake's bytes of each
    (it used to buffer 260 MiB)."""
    port = free_port()
    host = node(jobs, 0, port, ["--", *worker()])
    assert wait_until(lambda: _listening(port), timeout=60)
    before = rss_kib(host.pid)
    socks = []
    payload = struct.pack(">I", 2 * 1024 * 1024) + b"\x00" * (2 * 1024 * 1024 - 1)
    for _ in range(128):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        socks.append([s, memoryview(payload)])
    while socks:
        ready = select.select([], [s for s, _ in socks], [], 2)[1]
        if not ready:
            break  # nothing more is taken: node 0 stopped reading, or closed
        for entry in [e for e in socks if e[0] in ready]:
            try:
                sent = entry[0].send(entry[1][:262144])
                entry[1] = entry[1][sent:]
                if not entry[1]:
                    socks.remove(entry)
            except OSError:
                socks.remove(entry)  # closed by node 0: what it should do
                entry[0].close()
    grown = rss_kib(host.pid) - before
    for s, _ in socks:
        s.close()
    host.terminate()
    host.communicate(timeout=60)
    assert grown < 16 * 1024, f"node 0 grew by {grown} KiB"


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _flood(port, count):
    """`count` connections to the store that never say a word, held open
    (the file limit raised for them) until the block ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    flood = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            flood.append(s)
        yield
    finally:
        for s in flood:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_flood_of_unauthenticated_connections_delays_a_node_but_never_refuses_it(jobs):
    """One process opens 4,100 connections that never authenticate (more
    than --rdzv-max-clients' 4,096). Node 1, started during the flood, is
    not refused: it joins once the flood ends, and the job runs."""
    port = free_port()
    host = node(jobs, 0, port, ["--nproc-per-node", 1, "--", *worker()])
    assert wait_until(lambda: _listening(port), timeout=60)
    with _flood(port, 4100):
        member = node(jobs, 1, port, ["--nproc-per-node", 1, "--", *worker()])
        # The flood holds on until node 1 has tried for a while (or joined).
        wait_until(lambda: member.poll() is not None, timeout=2)
        assert member.poll() is None or member.returncode == 0, member.stderr.read()
    for p in (host, member):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "clients already" not in err, err


def test_a_hello_waiting_past_the_heartbeat_timeout_is_tried_again_not_refused(jobs):
    """A flood that fills node 0's listen backlog keeps node 1's HELLO
    unanswered longer than --heartbeat-timeout: no answer is no refusal, so
    node 1 tries again until --rdzv-timeout and joins once the flood drains
    (docs/SECURITY.md's promise)."""
    port = free_port()
    short = ["--heartbeat-timeout", 2, "--nproc-per-node", 1, "--", *worker()]
    host = node(jobs, 0, port, short)
    assert wait_until(lambda: _listening(port), timeout=60)
    with _flood(port, 4100):
        member = node(jobs, 1, port, short)
        # Twice the heartbeat timeout: node 1 gave up after one before.
        wait_until(lambda: member.poll() is not None, timeout=5)
        assert member.poll() is None, member.stderr.read()
    for p in (host, member):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "not a ddplaunch store" not in err and "without this job's token" not in err, err


def test_failed_handshakes_from_many_hosts_cost_a_few_warning_lines(jobs):
    """300 strangers from 300 loopback addresses offer a wrong proof: node 0
    names the first few hosts once each and sums up the rest in one line."""
    port = free_port()
    host = node(jobs, 0, port, ["--nproc-per-node", 1, "--", *worker()])
    assert wait_until(lambda: _listening(port), timeout=60)
    for i in range(300):
        s = socket.socket()
        s.bind((f"127.0.{1 + i // 200}.{1 + i % 200}", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(hello())
        reply = s.recv(4096)
        assert reply, "no answer to HELLO"
        s.sendall(frame(b"\x0b" + struct.pack(">I", 1) + text(os.urandom(32))))  # AUTH, wrong proof
        while s.recv(4096):
            pass
        s.close()
    member = node(jobs, 1, port, ["--nproc-per-node", 1, "--", *worker()])
    out, err = host.communicate(timeout=120)
    assert host.returncode == 0, err
    assert member.wait(timeout=60) == 0
    named = [l for l in err.splitlines() if "the store refused 127." in l]
    assert 1 <= len(named) <= 5, err
    assert "the store refused 295 more client(s) from 295 other host(s)" in err, err
