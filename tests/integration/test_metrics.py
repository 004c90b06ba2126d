"""--metrics-port (docs/METRICS.md): each agent serves OpenMetrics, scraped
here by a real Prometheus server; node 0 serves a live page, rendered here
by headless Chromium while a rank fails and the job restarts."""
import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import BIN, finish, free_port, wait_until

STEPS = 'i=0; while true; do echo "step $i of rank $RANK"; i=$((i+1)); sleep 0.1; done'


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()
    except OSError:
        return None, None, ""


def start_nodes(jobs, script, extra=()):
    port = free_port()
    metrics = [free_port(), free_port()]
    procs = [jobs.start(["--nnodes", 2, "--nproc-per-node", 2, "--master-port", port,
                         "--metrics-port", m, *extra, "--", "sh", "-c", script]) for m in metrics]
    for m in metrics:
        wait_until(lambda: get(f"http://127.0.0.1:{m}/metrics")[0] == 200, timeout=60)
    return procs, metrics


def stop(procs):
    for p in procs:
        p.send_signal(signal.SIGTERM)
    finish(procs)


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus")
def test_prometheus_scrapes_two_agents_and_reads_a_growing_progress_counter(jobs, tmp_path):
    procs, metrics = start_nodes(jobs, STEPS)
    status, kind, body = get(f"http://127.0.0.1:{metrics[0]}/metrics")
    assert kind.startswith("application/openmetrics-text") and body.endswith("# EOF\n"), body
    web = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: ddplaunch\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics[0]}', '127.0.0.1:{metrics[1]}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{web}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def query(q):
            url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            code, _, text = get(url)
            if code != 200:
                return None
            result = json.loads(text)["data"]["result"]
            return float(result[0]["value"][1]) if result else None
        assert wait_until(lambda: query("count(ddplaunch_rank_progress_events_total)") == 4,
                          timeout=60, interval=0.5)
        assert query('count(up{job="ddplaunch"} == 1)') == 2
        first = wait_until(lambda: query('ddplaunch_rank_progress_events_total{rank="3"}'),
                           timeout=60, interval=0.5)
        assert wait_until(lambda: (query('ddplaunch_rank_progress_events_total{rank="3"}') or 0)
                          > first, timeout=60, interval=0.5)
        assert query('ddplaunch_job_world_size') == 4
    finally:
        prom.terminate()
        prom.wait(timeout=30)
    stop(procs)


def chromium(url, tmp_path, screenshot=None):
    args = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=4000"]
    if screenshot:
        args += ["--window-size=1000,800", f"--screenshot={screenshot}", url]
    else:
        args += ["--dump-dom", url]
    return subprocess.run(args, capture_output=True, text=True, timeout=120).stdout


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_the_page_shows_a_failed_rank_then_the_restarted_round_in_a_real_browser(jobs, tmp_path):
    release = tmp_path / "release"
    script = (f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 3 ]; then sleep 1; '
              f'echo boom >&2; exit 3; fi; '
              f'trap "while [ ! -e {release} ]; do sleep 0.05; done; exit 0" TERM; ' + STEPS)
    procs, metrics = start_nodes(jobs, script, ["--max-restarts", 1, "--term-timeout", 120])
    # Node ranks are automatic: node 0 is the agent that serves the page.
    serving = wait_until(lambda: [m for m in metrics if get(f"http://127.0.0.1:{m}/")[0] == 200],
                         timeout=60)
    assert len(serving) == 1, serving
    node0 = serving[0]
    url = f"http://127.0.0.1:{node0}/"
    def rank_3_failed():
        code, _, text = get(url + "status.json")
        return code == 200 and any(r["rank"] == 3 and r["state"] == "failed"
                                   for r in json.loads(text)["ranks"])
    wait_until(rank_3_failed, timeout=60, interval=0.2)
    dom = chromium(url, tmp_path)
    assert 'id="rank-3" class="rank state-failed" data-state="failed"' in dom, dom
    assert 'data-event="verdict"' in dom and "rank 3 failed (exit 3)" in dom, dom
    release.touch()
    def round_1():
        code, _, text = get(url + "status.json")
        doc = json.loads(text) if code == 200 else {}
        return doc.get("job") and doc["job"]["round"] == 1 and len(doc["ranks"]) == 4
    wait_until(round_1, timeout=60, interval=0.2)
    dom = chromium(url, tmp_path)
    assert 'data-round="1"' in dom and 'data-event="restart"' in dom, dom
    assert 'id="rank-3" class="rank state-running"' in dom, dom
    artifacts = Path(BIN).parent / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = artifacts / "status_page.png"
    chromium(url, tmp_path, screenshot=shot)
    assert shot.stat().st_size > 10000
    stop(procs)


def test_bad_metrics_flags_are_one_line_and_exit_2(jobs):
    taken = free_port()
    holder = jobs.start(["--nnodes", 1, "--metrics-port", taken, "--", "sleep", "300"])
    wait_until(lambda: get(f"http://127.0.0.1:{taken}/metrics")[0] == 200, timeout=60)
    for args, says in (([ "--metrics-port", taken], "the port is in use on 127.0.0.1"),
                       (["--metrics-port", free_port(), "--metrics-bind", "192.0.2.77"],
                        "not an address of this host"),
                       (["--metrics-port", free_port(), "--metrics-bind", "node0"],
                        "not an IP address"),
                       (["--metrics-port", "70000"], "a port from 1 to 65535")):
        r = jobs.run([*args, "--", "true"])
        assert r.returncode == 2, (args, r.stderr)
        errors = [l for l in r.stderr.splitlines() if "error" in l]
        assert len(errors) == 1 and says in errors[0], (args, r.stderr)
    # A one-node job serves its own page and metrics.
    code, kind, page = get(f"http://127.0.0.1:{taken}/")
    assert code == 200 and "<title>ddplaunch job</title>" in page
    code, _, text = get(f"http://127.0.0.1:{taken}/status.json")
    assert code == 200 and json.loads(text)["ranks"][0]["state"] == "running", text
    assert get(f"http://127.0.0.1:{taken}/nothing")[0] == 404
    holder.send_signal(signal.SIGTERM)
    finish([holder])


def two_free_ports():
    """A port P with P+1 free too."""
    import socket
    for _ in range(100):
        p = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise AssertionError("no two free ports in a row")


def test_agents_sharing_a_host_each_take_the_next_port(jobs, tmp_path):
    """One command starts both agents on this machine (--launcher local):
    the first serves on P, the next on P+1 (docs/METRICS.md), not a clash."""
    port = two_free_ports()
    done = tmp_path / "done"
    script = (f'while [ ! -e {done} ]; do echo "step of rank $RANK"; sleep 0.1; done')
    proc = jobs.start(["--hosts", "a:1,b:1", "--launcher", "local", "--metrics-port", port,
                       "--", "sh", "-c", script])
    for p, node in ((port, 0), (port + 1, 1)):
        # Its node rank once rendezvous named it (-1 before).
        assert wait_until(lambda: f'ddplaunch_node{{node_rank="{node}"' in
                          get(f"http://127.0.0.1:{p}/metrics")[2], timeout=60, interval=0.1), \
            get(f"http://127.0.0.1:{p}/metrics")
    done.touch()
    rc, _, err = finish([proc])[0]
    assert rc == 0, err


def test_an_idle_connection_is_closed_after_its_timeout_with_nothing_else_happening(jobs):
    # libmicrohttpd asks for a deadline (MHD_get_timeout) that the loop
    # keeps: a client that connects and falls silent is closed after 10 s
    # even when no other request or event comes to wake the listener.
    import socket
    import time
    m = free_port()
    p = jobs.start(["--nproc-per-node", 1, "--metrics-port", m, "--", "sleep", "120"])
    assert wait_until(lambda: get(f"http://127.0.0.1:{m}/metrics")[0] == 200, timeout=60)
    with socket.create_connection(("127.0.0.1", m), timeout=60) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finished
        began = time.monotonic()
        assert s.recv(1) == b""  # closed by the server
        took = time.monotonic() - began
    assert 5 < took < 40, took
    p.send_signal(signal.SIGTERM)
    finish([p])
