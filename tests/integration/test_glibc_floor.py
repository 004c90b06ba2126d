"""The glibc floor (README, "Install"; docs/ARCHITECTURE.md): the binary this
build makes starts and works on glibc 2.31. For real: in a Debian 11
(bullseye) root made with debootstrap from Debian's package registry, kept
between runs, with that system's own libcrypto 1.1 and libmicrohttpd. Each
command runs chrooted in a mount namespace of its own, whose /proc goes with
it."""
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import urllib.request

import pytest
from conftest import BIN, finish, free_port, succeeded, wait_until

pytestmark = pytest.mark.skipif(bool(os.environ.get("DDPLAUNCH_SANITIZE")),
                                reason="a sanitizer build has no glibc floor")

FLOOR = (2, 31)
CACHE = os.environ.get("DDPLAUNCH_BULLSEYE_ROOT", "/var/cache/ddplaunch-tests/bullseye")
MIRROR = "http://deb.debian.org/debian"
PACKAGES = "libssl1.1,libmicrohttpd12"


def glibc_versions(path):
    """{symbol: version} of each glibc symbol `path` imports."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.search(r"\((GLIBC_[0-9.]+|GLIBC_ABI_[A-Z_]+)\)\s+(\S+)$", line)
        if m:
            found[m.group(2)] = m.group(1)
    return found


def test_the_binary_asks_for_nothing_newer_than_glibc_2_31():
    newer = {}
    for symbol, version in glibc_versions(BIN).items():
        numbers = re.findall(r"\d+", version)
        if not numbers or tuple(map(int, numbers[:2])) > FLOOR:
            newer[symbol] = version
    assert not newer, f"symbols past glibc {FLOOR[0]}.{FLOOR[1]}: {newer}"
    dynamic = subprocess.run(["readelf", "-d", "-V", BIN], capture_output=True, text=True,
                             check=True).stdout
    assert "GLIBC_ABI_DT_RELR" not in dynamic and "(RELR)" not in dynamic


@pytest.fixture(scope="module")
def bullseye():
    """A Debian 11 root with this build's binary as /usr/local/bin/ddplaunch."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip("needs root and Debian's debootstrap to make a Debian 11 root")
    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    with open(CACHE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(CACHE, ".complete")):
            shutil.rmtree(CACHE, ignore_errors=True)
            r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}",
                                "bullseye", CACHE, MIRROR], capture_output=True, text=True,
                               timeout=900)
            if r.returncode != 0:
                shutil.rmtree(CACHE, ignore_errors=True)
                pytest.skip(f"debootstrap could not make a Debian 11 root from {MIRROR} "
                            f"(is the registry reachable?): {r.stdout[-300:]}{r.stderr[-300:]}")
            open(os.path.join(CACHE, ".complete"), "w").close()
        installed = os.path.join(CACHE, "usr/local/bin/ddplaunch")
        shutil.copy2(BIN, installed)
        try:
            yield CACHE
        finally:
            os.unlink(installed)


def chrooted(root, *args):
    """argv that runs `args` in `root` with a /proc of its own."""
    script = 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, root,
            *map(str, args)]


def start(jobs, root, *args, env=None):
    p = subprocess.Popen(chrooted(root, "/usr/local/bin/ddplaunch", *args),
                         env=jobs.env({"TMPDIR": "/tmp", **(env or {})}), text=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    jobs.procs.append(p)
    return p


def test_version_and_check_run_on_glibc_2_31(jobs, bullseye):
    libc = subprocess.run(chrooted(bullseye, "ldd", "--version"), capture_output=True,
                          text=True, check=True).stdout
    assert "2.31" in libc.splitlines()[0], libc
    r = subprocess.run(chrooted(bullseye, "/usr/local/bin/ddplaunch", "--version"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("ddplaunch "), r.stderr
    r = subprocess.run(chrooted(bullseye, "/usr/local/bin/ddplaunch", "check"),
                       capture_output=True, text=True, timeout=120, env=jobs.env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "disk: ok" in r.stdout + r.stderr


# Each worker writes a key with the store CLI (the workers' credential,
# derived with libcrypto) and reads it back; the launcher's own map shows
# which libcrypto it loaded.
STORE_WORKER = ("ddplaunch store set user/k$RANK v$RANK && echo read $(ddplaunch store get "
                "user/k$RANK); grep -o 'libcrypto.so.[0-9.]*' /proc/$PPID/maps | head -n 1")


def two_nodes(jobs, starts, token="a-job-token-of-our-own"):
    port = free_port()
    procs = [s(n, ["--nnodes", 2, "--nproc-per-node", 2, "--master-addr", "127.0.0.1",
                   "--master-port", port, "--rdzv-timeout", 60, "--", "sh", "-c", STORE_WORKER],
               {"DDPLAUNCH_RDZV_TOKEN": token}) for n, s in enumerate(starts)]
    return finish(procs, timeout=120)


def test_a_two_node_job_with_a_token_uses_libcrypto_1_1(jobs, bullseye):
    inside = lambda n, args, env: start(jobs, bullseye, *args, env=env)
    out = succeeded(two_nodes(jobs, [inside, inside]))
    for rank in range(4):
        assert f"read v{rank}" in out, out
    assert out.count("libcrypto.so.1.1") == 4, out


def test_a_node_on_libcrypto_1_1_and_one_on_libcrypto_3_share_one_job(jobs, bullseye):
    inside = lambda n, args, env: start(jobs, bullseye, *args, env=env)
    path = f"{os.path.dirname(BIN)}:{os.environ['PATH']}"  # its workers' `ddplaunch store`
    here = lambda n, args, env: jobs.start(args, env={**env, "PATH": path})
    results = two_nodes(jobs, [here, inside])
    for rc, _, stderr in results:
        assert rc == 0, stderr
    assert results[0][1].count("libcrypto.so.3") == 2, results[0][1]
    assert results[1][1].count("libcrypto.so.1.1") == 2, results[1][1]
    for rank in range(4):
        assert f"read v{rank}" in results[0][1] + results[1][1]


def test_metrics_are_served_with_debian_11s_libmicrohttpd(jobs, bullseye, tmp_path):
    go = f"/tmp/go-{jobs.marker}"
    metrics = free_port()
    p = start(jobs, bullseye, "--nproc-per-node", 2, "--metrics-port", metrics, "--", "sh", "-c",
              f"while [ ! -e {go} ]; do sleep 0.05; done; echo done $RANK")

    def scrape():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None

    body = wait_until(scrape, timeout=60)
    with contextlib.suppress(FileNotFoundError):
        open(os.path.join(bullseye, go.lstrip("/")), "w").close()
    out, err = p.communicate(timeout=60)
    os.unlink(os.path.join(bullseye, go.lstrip("/")))
    assert body and body.endswith("# EOF\n"), (body, err)
    assert "ddplaunch_" in body
    assert p.returncode == 0 and out.count("done") == 2, err
