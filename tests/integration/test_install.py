"""The store from native programs and the install tree: the CPU bootstrap
example (examples/store_bootstrap.cpp) under a two-node job, and a
downstream CMake project that finds the installed package and builds a
client with `find_package(ddplaunch CONFIG)` + `ddplaunch::store`."""
import os
import subprocess

import pytest
from conftest import BIN, SOURCE_DIR, free_port

BOOTSTRAP = os.environ.get("DDPLAUNCH_STORE_BOOTSTRAP",
                           os.path.join(os.path.dirname(BIN), "examples", "store_bootstrap"))


def two_nodes(jobs, program, nproc=2):
    port = free_port()
    procs = [jobs.start(["--nnodes", 2, "--node-rank", n, "--nproc-per-node", nproc,
                         "--master-port", port, "--", program]) for n in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out)
    return "".join(outs)


def test_the_bootstrap_example_shares_an_id_across_two_nodes(jobs):
    out = two_nodes(jobs, BOOTSTRAP)
    assert out.count("bootstrap id shared, sum 6 (expected 6)") == 4, out


@pytest.mark.skipif(bool(os.environ.get("DDPLAUNCH_SANITIZE")),
                    reason="a sanitizer build's library needs the sanitizer's runtime to link")
def test_a_downstream_project_builds_against_the_install_tree(jobs, tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", os.path.dirname(BIN), "--prefix", prefix],
                   check=True, capture_output=True, timeout=120)
    for path in ["bin/ddplaunch", "include/ddplaunch/store_client.hpp",
                 "lib/cmake/ddplaunch/ddplaunchConfig.cmake", "lib/libddplaunch_store.a"]:
        assert (prefix / path).exists(), path
    header = (prefix / "include/ddplaunch/store_client.hpp").read_text()
    includes = [l for l in header.splitlines() if l.startswith("#include")]
    assert all("<" in l and "/" not in l.split("<")[1] for l in includes), includes
    build = tmp_path / "downstream"
    r = subprocess.run(["cmake", "-S", os.path.join(SOURCE_DIR, "examples"), "-B", build,
                        f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["cmake", "--build", build, "--target", "store_bootstrap"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = two_nodes(jobs, str(build / "store_bootstrap"), nproc=1)
    assert out.count("bootstrap id shared, sum 1 (expected 1)") == 2, out
    # tests/downstream: a project of its own, as a user's.
    check = tmp_path / "check"
    for command in (["cmake", "-S", os.path.join(SOURCE_DIR, "tests", "downstream"), "-B", check,
                     f"-DCMAKE_PREFIX_PATH={prefix}"], ["cmake", "--build", check]):
        r = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
    r = jobs.run(["--nproc-per-node", 3, "--", check / "store_client_check"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("read 'from rank 0' under prefix 'user/'") == 3, r.stdout


def test_the_man_page_renders_with_every_section():
    page = os.path.join(os.path.dirname(BIN), "ddplaunch.1")
    if not os.path.exists(page):
        pytest.skip("no man page: help2man is not installed (quickstart installs it)")
    r = subprocess.run(["man", "-l", page], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="100", MANPAGER="cat", PAGER="cat"))
    assert r.returncode == 0, r.stderr
    for section in ["NAME", "SYNOPSIS", "OPTIONS", "ENVIRONMENT", "EXIT STATUS", "EXAMPLES"]:
        assert f"\n{section}\n" in r.stdout, section
    for text in ["--nproc-per-node", "--max-restarts", "Nodes and rendezvous:", "srun -N 2",
                 "DDPLAUNCH_STORE_ADDR"]:
        assert text in r.stdout, text


def test_the_bash_completion_loads_and_completes_options_and_subcommands():
    script = os.path.join(os.path.dirname(BIN), "completion", "ddplaunch")
    r = subprocess.run(["bash", "-c", f"""
        source {script} || exit 9
        COMP_WORDS=(ddplaunch --nproc-per-n); COMP_CWORD=1; _ddplaunch; echo "1:${{COMPREPLY[*]}}"
        COMP_WORDS=(ddplaunch store ca); COMP_CWORD=2; _ddplaunch; echo "2:${{COMPREPLY[*]}}"
        COMP_WORDS=(ddplaunch token i); COMP_CWORD=2; _ddplaunch; echo "3:${{COMPREPLY[*]}}"
        complete -p ddplaunch
    """], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1:--nproc-per-node" in r.stdout and "2:cas" in r.stdout, r.stdout
    assert "3:init" in r.stdout, r.stdout
    assert "complete -F _ddplaunch ddplaunch" in r.stdout


@pytest.mark.skipif(bool(os.environ.get("DDPLAUNCH_SANITIZE")) or os.geteuid() != 0,
                    reason="packages the plain build; dpkg --root needs root")
def test_the_deb_installs_runs_and_uninstalls_in_a_clean_root(tmp_path):
    build = os.path.dirname(BIN)
    r = subprocess.run(["cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"),
                        "-B", tmp_path / "pkg"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    debs = list((tmp_path / "pkg").glob("ddplaunch_*.deb"))
    assert len(debs) == 1, r.stdout
    info = subprocess.run(["dpkg-deb", "-f", debs[0], "Depends"], capture_output=True, text=True)
    # libc6 alone, at the binary's floor (test_glibc_floor.py).
    assert info.stdout.strip() == "libc6 (>= 2.31)", info.stdout
    # What it loads when a feature needs it (dlopen): the store's
    # authentication (libcrypto), the MPI workers' PMIx server and
    # --metrics-port's listener (libmicrohttpd).
    info = subprocess.run(["dpkg-deb", "-f", debs[0], "Recommends"], capture_output=True, text=True)
    assert [p.strip() for p in info.stdout.split(",")] == ["libssl3 | libssl1.1", "libpmix2",
                                                         "libmicrohttpd12"], info.stdout
    # A root of its own: an empty dpkg database with libc6 (the one dependency)
    # copied from this machine's, so the machine's own packages are untouched.
    root = tmp_path / "root"
    (root / "var/lib/dpkg/info").mkdir(parents=True)
    (root / "var/lib/dpkg/updates").mkdir()
    stanzas = open("/var/lib/dpkg/status").read().split("\n\n")
    libc = [s for s in stanzas if s.startswith("Package: libc6\n")]
    (root / "var/lib/dpkg/status").write_text(libc[0].strip() + "\n\n")
    (root / "var/lib/dpkg/info/libc6:amd64.list").write_text("")
    dpkg = ["dpkg", f"--root={root}", "--log=/dev/null"]
    r = subprocess.run(dpkg + ["-i", debs[0]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([root / "usr/bin/ddplaunch", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("ddplaunch "), r.stderr
    for path in ["usr/share/man/man1/ddplaunch.1.gz", "usr/share/doc/ddplaunch/copyright",
                 "usr/share/doc/ddplaunch/ENVIRONMENT.md",
                 "usr/share/bash-completion/completions/ddplaunch",
                 "usr/lib/cmake/ddplaunch/ddplaunchConfig.cmake", "usr/include/ddplaunch/store_client.hpp"]:
        assert (root / path).exists(), path
    r = subprocess.run(dpkg + ["-r", "ddplaunch"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (root / "usr/bin/ddplaunch").exists()
    host = subprocess.run(["dpkg-query", "-W", "ddplaunch"], capture_output=True, text=True)
    assert host.returncode != 0, "the machine's own dpkg database is untouched"
