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
