"""Jobs across real hosts: network namespaces joined by a bridge, each host
with its own address, host name and /etc/hosts (Debian's 127.0.1.1 self
entry included), one agent on each. What a job across machines meets and a
job on loopback does not: a host's own name that resolves to loopback, and
gloo choosing its interface."""
import json
import os
import re
import shutil
import subprocess

import pytest

import netns
from conftest import (BIN, SOURCE_DIR, TORCH_PYTHON, env_lines, finish, needs_torch, read_until,
                      worker)

why_not = netns.available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=str(why_not))


def start_agents(jobs, hosts, args, env=None, port=None):
    port = port or hosts.free_port("node0")
    procs = []
    for n, host in enumerate(hosts.names):
        argv = hosts.command(host, [BIN, "--nnodes", len(hosts.names), "--node-rank", n,
                                    "--master-addr", "node0", "--master-port", port,
                                    "--rdzv-timeout", 120, *args])
        p = subprocess.Popen(argv, env=jobs.env(env), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        jobs.procs.append(p)
        procs.append(p)
    return procs


def test_agents_on_two_hosts_form_one_job_and_workers_get_the_host_interface(jobs, hosts):
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 2, "--", *worker("env")])
    envs = {}
    for rc, out, err in finish(procs):
        assert rc == 0, err
        envs.update(env_lines(out))
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, e in envs.items():
        assert e["WORLD_SIZE"] == "4" and e["NODE_RANK"] == str(rank // 2)
        # node0's own name maps to 127.0.1.1 on node0 (Debian's self entry):
        # the workers still get the interface that reaches the other host.
        assert e["MASTER_ADDR"] == "node0"
        assert e["GLOO_SOCKET_IFNAME"] == "eth0" and e["NCCL_SOCKET_IFNAME"] == "eth0"


def test_interface_the_user_chose_is_kept(jobs, hosts):
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--", *worker("env")],
                         env={"GLOO_SOCKET_IFNAME": "eth0,lo"})
    for rc, out, err in finish(procs):
        assert rc == 0, err
        assert {e["GLOO_SOCKET_IFNAME"] for e in env_lines(out).values()} == {"eth0,lo"}


def test_failure_on_one_host_ends_both_with_its_code(jobs, hosts):
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 2, "--",
                                       *worker("@3:err=broke on node1", "@3:exit=7", "sleep=300")])
    results = finish(procs)
    for rc, out, err in results:
        assert rc == 7, err
    assert "rank 3 (node 1, local rank 1, host node1" in results[0][2], results[0][2]



@needs_torch
def test_real_pytorch_across_two_hosts_with_nothing_about_interfaces_typed(jobs, hosts):
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 2, "--python", TORCH_PYTHON, "--",
                                       example, 2])
    lines = []
    for rc, out, err in finish(procs):
        assert rc == 0, err
        lines += [l for l in out.splitlines() if "replicas" in l]
    assert len(lines) == 4 and all("/4: all-reduce 10," in l for l in lines), lines


def add_management_nic(hosts, host):
    """A second interface on `host`, on a network no other host is on, that
    holds the default route: a multi-NIC node whose management NIC is not the
    one its peers reach it by."""
    ns = hosts.namespaces[host]
    # A veth whose other end sits, up, in the switch namespace but on no
    # bridge: a link with carrier that leads nowhere the peers are.
    here, there = f"dl{hosts.id}m0", f"dl{hosts.id}m1"
    subprocess.run(["ip", "link", "add", here, "type", "veth", "peer", "name", there], check=True)
    subprocess.run(["ip", "link", "set", here, "netns", ns], check=True)
    subprocess.run(["ip", "link", "set", there, "netns", hosts.switch], check=True)
    subprocess.run(["ip", "-n", hosts.switch, "link", "set", there, "up"], check=True)
    for args in (["link", "set", here, "name", "mgmt0"],
                 ["addr", "add", "192.168.77.1/24", "dev", "mgmt0"],
                 ["link", "set", "mgmt0", "up"],
                 ["route", "add", "default", "via", "192.168.77.254", "dev", "mgmt0"]):
        subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True)


def test_a_multi_nic_node_0_gives_gloo_the_interface_its_peers_reach(jobs, hosts):
    """node0's default route is on mgmt0, which node1 cannot reach, and its own
    name maps to 127.0.1.1: after rendezvous, when node 1's address is known,
    node 0's workers get the interface that reaches it (eth0), as node 1's do."""
    add_management_nic(hosts, "node0")
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--report-bindings", "--",
                                       *worker("env")])
    envs = {}
    for rc, out, err in finish(procs):
        assert rc == 0, err
        envs.update(env_lines(out))
        assert "gloo and NCCL use interface eth0 (the one this node reaches its peers from)" in err, err
    assert {e["GLOO_SOCKET_IFNAME"] for e in envs.values()} == {"eth0"}, envs


@needs_torch
def test_real_pytorch_on_a_multi_nic_node_0_with_nothing_typed(jobs, hosts):
    add_management_nic(hosts, "node0")
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--python", TORCH_PYTHON, "--",
                                       example, 2])
    lines = []
    for rc, out, err in finish(procs):
        assert rc == 0, err
        lines += [l for l in out.splitlines() if "replicas" in l]
    assert len(lines) == 2 and all("/2: all-reduce" in l for l in lines), lines


RSH = os.path.join(SOURCE_DIR, "tests", "helpers", "netns_rsh.sh")


def mpirun_across(jobs, hosts, args, timeout=300):
    """Real mpirun on node0 starting one ddplaunch per host; its rsh agent
    enters the other host's namespace where ssh would log in."""
    env = jobs.env({"DDPLAUNCH_NETNS_PREFIX": hosts.prefix, "OMPI_ALLOW_RUN_AS_ROOT": "1",
                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    cmd = hosts.command("node0", ["mpirun", "--host", "node0,node1", "-np", 2, "--mca",
                                  "plm_rsh_agent", RSH, BIN, *args])
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True)
    jobs.procs.append(p)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")


@needs_mpirun
def test_mpirun_across_two_hosts_finds_node_zero_through_pmix(jobs, hosts, tmp_path):
    rc, out, err = mpirun_across(jobs, hosts, ["--nproc-per-node", 2, "--log-dir", tmp_path, "--",
                                               *worker("env")])
    assert rc == 0, err
    envs = {int(d): json.loads((tmp_path / d / "stdout.log").read_text()) for d in os.listdir(tmp_path)}
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, e in envs.items():
        assert e["NODE_RANK"] == str(rank // 2) and e["WORLD_SIZE"] == "4"
        # Nobody typed node 0's address: it came through mpirun's PMIx server.
        assert e["MASTER_ADDR"] == hosts.addrs["node0"]
        assert e["GLOO_SOCKET_IFNAME"] == "eth0"


@needs_mpirun
@needs_torch
def test_real_pytorch_under_mpirun_across_two_hosts(jobs, hosts):
    example = os.path.join(SOURCE_DIR, "examples", "ddp_gloo.py")
    rc, out, err = mpirun_across(jobs, hosts, ["--nproc-per-node", 2, "--python", TORCH_PYTHON,
                                               "--", example, 2])
    assert rc == 0, err
    lines = [l for l in out.splitlines() if "replicas" in l]
    assert len(lines) == 4 and all("/4: all-reduce 10," in l for l in lines), out


# --- the network preflight -------------------------------------------------------

needs_nft = pytest.mark.skipif(shutil.which("nft") is None, reason="needs nftables (nft)")


def firewall(hosts, host, rule):
    """`rule` in an input chain of its own on `host` (gone with its namespace)."""
    script = ("table inet ddpl {\n chain input {\n type filter hook input priority 0; "
              f"policy accept;\n {rule}\n }}\n}}\n")
    subprocess.run(["ip", "netns", "exec", hosts.namespaces[host], "nft", "-f", "-"],
                   input=script, text=True, check=True)


@needs_nft
def test_a_host_whose_firewall_drops_the_probe_port_ends_the_job_before_any_worker(
        jobs, three_hosts, tmp_path):
    """node2 drops every new connection to its ephemeral ports (where its
    probe port, like gloo's, is): instead of a gloo hang, every node exits 3
    once --preflight-timeout passes, naming both nodes, the address and the
    port; no worker ever started."""
    hosts = three_hosts
    firewall(hosts, "node2", "tcp dport 32768-60999 ct state new drop")
    started = tmp_path / "started"
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--preflight-timeout", 6, "--",
                                       "sh", "-c", f"touch {started}"])
    results = finish(procs, timeout=120)
    for rc, out, err in results:
        assert rc == 3, err
    err0 = results[0][2]
    addr2 = hosts.addrs["node2"]
    assert f"network preflight: node 0 (node0) cannot reach node 2 (node2) at {addr2}:" in err0, err0
    assert "(its probe port, on the address gloo and NCCL use): no answer within 6 s" in err0, err0
    # Meanwhile (a progress line comes every 5 s) node 0 said what it waits for:
    # every node joined, their reports had not.
    assert "network preflight: waiting for the nodes' reports: 1 of 3 in (missing: node 0 " \
        "(node0), node 1 (node1))" in err0, err0
    assert "waiting for more nodes" not in err0, err0
    assert "(and 1 more path: each node's log names its own)" in err0, err0
    assert "--no-preflight" in err0
    assert f"node 1 (node1) cannot reach node 2 (node2) at {addr2}:" in results[1][2], results[1][2]
    assert not started.exists(), "a worker started"


@needs_nft
def test_node_0_rejecting_master_port_is_named_by_the_node_that_cannot_reach_it(
        jobs, hosts, tmp_path):
    """node0 resets connections to the workers' MASTER_PORT (--worker-port):
    torch's store would be out of reach from node1; the preflight says so at
    once (a refusal needs no timeout), and in node1's event log."""
    port = hosts.free_port("node0")
    firewall(hosts, "node0", f"tcp dport {port} reject with tcp reset")
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--worker-port", port,
                                       "--event-log", tmp_path / "events-{node_rank}.jsonl", "--",
                                       "true"])
    results = finish(procs, timeout=120)
    for rc, out, err in results:
        assert rc == 3, err
    blocked = (f"node 1 (node1) cannot reach node 0 (node0) at node0:{port} (MASTER_PORT, where "
               "rank 0's store will listen): connection refused")
    assert blocked in results[0][2], results[0][2]
    for n, ok in ((0, True), (1, False)):
        found = [json.loads(line) for line in
                 (tmp_path / f"events-{n}.jsonl").read_text().splitlines()]
        pre = [e for e in found if e["event"] == "preflight"]
        assert len(pre) == 1 and pre[0]["ok"] is ok and pre[0]["node"] == n, found
        assert (pre[0]["first_blocked"] is None) if ok else blocked in pre[0]["first_blocked"], pre
        assert found[-1]["event"] == "job_end" and found[-1]["exit_code"] == 3, found


@needs_nft
def test_no_preflight_starts_the_job_whatever_the_firewall(jobs, hosts):
    firewall(hosts, "node1", "tcp dport 32768-60999 ct state new drop")
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--no-preflight", "--", "true"])
    for rc, out, err in finish(procs, timeout=120):
        assert rc == 0, err


@needs_nft
def test_a_node_whose_first_connects_get_no_answer_joins_once_the_path_opens(jobs, hosts):
    """node0's firewall drops node1's connects to the store at first, as a
    path that is not up yet would: each attempt times out (5 s). Once the
    path opens, node1's next attempt joins and the job runs; a timed-out
    attempt must leave the next socket watched even under the same fd number."""
    port = hosts.free_port("node0")
    firewall(hosts, "node0", f'iifname "eth0" tcp dport {port} drop')
    procs = start_agents(jobs, hosts, ["--nproc-per-node", 1, "--rdzv-timeout", 60, "--",
                                       *worker("out=ran")], port=port)
    attempt = re.compile(r"connecting to the store at \S+ \(attempt [2-9]")
    lines = read_until(procs[1].stderr, attempt)
    assert lines and attempt.search(lines[-1]), "".join(lines)
    subprocess.run(["ip", "netns", "exec", hosts.namespaces["node0"], "nft", "delete", "table",
                    "inet", "ddpl"], check=True)
    for rc, out, err in finish(procs, timeout=120):
        assert rc == 0, err
        assert "ran" in out
