"""Worker output: whole lines, prefixes, no loss, files, filters."""
import collections
import os
import re
import select
import shutil

import pytest

from conftest import worker


def test_no_line_is_lost_and_lines_never_interleave(jobs):
    r = jobs.run(["--nproc-per-node", 4, "--", *worker("chunked=3000", "lines=20000")])
    assert r.returncode == 0
    counts = collections.Counter()
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\[rank (\d)\]: (?:rank(\d)-line\d+-end|line \d+)", line)
        assert m, f"mangled line: {line!r}"
        if m.group(2) is not None:
            assert m.group(1) == m.group(2), f"line of another rank: {line!r}"
        counts[m.group(1)] += 1
    assert counts == {str(r): 23000 for r in range(4)}


def test_final_line_without_newline_is_flushed(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("out=first", "partial=no newline")])
    assert sorted(r.stdout.splitlines()) == sorted(
        ["[rank 0]: first", "[rank 0]: no newline", "[rank 1]: first", "[rank 1]: no newline"])
    assert r.stdout.endswith("\n")


def test_long_lines_are_flushed_in_pieces_and_nothing_is_lost(jobs):
    r = jobs.run(["--", *worker("long=200000", "out=after")])
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[-1] == "[rank 0]: after"
    pieces = [l[len("[rank 0]: "):] for l in lines[:-1]]
    assert all(len(p) <= 64 * 1024 for p in pieces)
    assert "".join(pieces) == "x" * 200000


def test_stderr_stays_stderr(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--", *worker("out=to-out", "err=to-err")])
    assert sorted(r.stdout.splitlines()) == ["[rank 0]: to-out", "[rank 1]: to-out"]
    assert "[rank 0]: to-err" in r.stderr and "[rank 1]: to-err" in r.stderr
    assert "to-out" not in r.stderr


def test_prefix_template_and_no_prefix(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--prefix", "<{local_rank}/{rank}@{host}> ", "--", *worker("out=x")])
    host = os.uname().nodename
    assert sorted(r.stdout.splitlines()) == [f"<0/0@{host}> x", f"<1/1@{host}> x"]
    r = jobs.run(["--nproc-per-node", 2, "--no-prefix", "--", *worker("out=x")])
    assert r.stdout == "x\nx\n"
    r = jobs.run(["--prefix", "{time} ", "--", *worker("out=x")])
    assert re.fullmatch(r"\d\d:\d\d:\d\d x\n", r.stdout)


def test_log_dir_gets_every_stream_raw(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 2, "--log-dir", tmp_path, "--", *worker("out=hello", "err=oops", "partial=tail")])
    assert r.returncode == 0
    for rank in (0, 1):
        assert (tmp_path / str(rank) / "stdout.log").read_text() == "hello\ntail"
        assert (tmp_path / str(rank) / "stderr.log").read_text() == "oops\n"
    assert "[rank 1]: hello" in r.stdout, "the console still gets everything"


def test_redirects_send_streams_to_files_only(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 2, "--log-dir", tmp_path, "--redirects", "0:1,1:3", "--",
                  *worker("out=o", "err=e")])
    assert r.stdout.splitlines() == [], "rank 0 stdout and rank 1 both streams are redirected"
    assert "[rank 0]: e" in r.stderr and "[rank 1]: e" not in r.stderr
    assert (tmp_path / "1" / "stderr.log").read_text() == "e\n"
    assert (tmp_path / "0" / "stdout.log").read_text() == "o\n"


def test_tee_without_log_dir_makes_one(jobs):
    r = jobs.run(["--tee", "3", "--rdzv-id", "teejob", "--", *worker("out=o")])
    assert r.stdout == "[rank 0]: o\n"
    m = re.search(r"writing worker logs under (\S+)", r.stderr)
    assert m, r.stderr
    try:
        assert open(os.path.join(m.group(1), "0", "stdout.log")).read() == "o\n"
    finally:
        shutil.rmtree(m.group(1), ignore_errors=True)  # the job's logs: the user's to keep


def test_ranks_filter_limits_the_console_but_not_the_files(jobs, tmp_path):
    r = jobs.run(["--nproc-per-node", 4, "--ranks-filter", "0,3", "--log-dir", tmp_path, "--",
                  *worker("out=o", "err=e")])
    assert sorted(r.stdout.splitlines()) == ["[rank 0]: o", "[rank 3]: o"]
    assert "[rank 1]" not in r.stderr
    assert (tmp_path / "2" / "stdout.log").read_text() == "o\n"


def test_a_ranks_filter_that_matches_no_rank_says_so(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--ranks-filter", "5", "--", *worker("out=o")])
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert "--ranks-filter 5 matches no rank of this job (ranks 0-1)" in r.stderr, r.stderr
    r = jobs.run(["--nproc-per-node", 2, "--ranks-filter", "1,5", "--", *worker("out=o")])
    assert "matches no rank" not in r.stderr, r.stderr


def test_failure_report_keeps_the_last_stderr_lines_even_if_filtered(jobs):
    r = jobs.run(["--nproc-per-node", 2, "--ranks-filter", "0", "--",
                  *worker("@1:err=first", "@1:err=last words", "@1:exit=4", "sleep=60")])
    assert r.returncode == 4
    assert "  | last words" in r.stderr and "[rank 1]: last words" not in r.stderr


def test_bad_log_dir_is_a_clear_error(jobs, tmp_path):
    (tmp_path / "file").write_text("")
    r = jobs.run(["--log-dir", tmp_path / "file" / "sub", "--", *worker()])
    assert r.returncode == 2
    assert "--log-dir" in r.stderr and r.stderr.count("\n") == 1


def test_progress_bar_updates_reach_the_console_at_once(jobs, tmp_path):
    # tqdm-style: "\r" then the bar, no newline until the end.
    bar = tmp_path / "bar.sh"
    bar.write_text('#!/bin/sh\nprintf "\\r 50%%|##  |" >&2\n'
                   f'while [ ! -e {tmp_path}/go ]; do sleep 0.01; done\n'
                   'printf "\\r100%%|####|\\n" >&2\n')
    bar.chmod(0o755)
    p = jobs.start(["--log-dir", tmp_path / "logs", "--", bar])
    seen = b""
    fd = p.stderr.fileno()
    while b"[rank 0]:  50%|##  |\r" not in seen:
        ready, _, _ = select.select([fd], [], [], 30)
        assert ready, f"the update never came before the line ended: {seen!r}"
        chunk = os.read(fd, 4096)
        assert chunk, seen
        seen += chunk
    (tmp_path / "go").write_text("")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0
    assert "[rank 0]: 100%|####|\n" in err
    # The log file keeps the raw bytes.
    assert (tmp_path / "logs" / "0" / "stderr.log").read_bytes() == b"\r 50%|##  |\r100%|####|\n"


def _sequences(text, prefixed=True):
    """Each rank's numbers, in the order shown; a mangled line fails."""
    seen = collections.defaultdict(list)
    pattern = r"\[rank (\d+)\]: (\d+):(\d+)" if prefixed else r"()(\d+):(\d+)"
    for line in text.splitlines():
        m = re.fullmatch(pattern, line)
        assert m, f"mangled line: {line[:200]!r}"
        if prefixed:
            assert m.group(1) == m.group(2), f"line of another rank: {line!r}"
        seen[int(m.group(2))].append(int(m.group(3)))
    return seen


@pytest.mark.parametrize("prefix", [True, False])
def test_flooding_workers_keep_every_line_whole_and_in_order(jobs, prefix):
    """Workers that fill their pipes are read on reader threads: no line is
    lost, cut or mixed with another rank's, and each rank's lines keep their
    order, with a prefix or without."""
    n = 300_000
    r = jobs.run(["--nproc-per-node", 4, *([] if prefix else ["--no-prefix"]), "--",
                  *worker(f"seq={n}")])
    assert r.returncode == 0, r.stderr
    seen = _sequences(r.stdout, prefix)
    assert {rank: seq == list(range(n)) for rank, seq in seen.items()} == {k: True for k in range(4)}


def test_a_flooding_workers_last_stderr_lines_are_in_its_failure_report(jobs):
    """A worker that floods its stderr and fails: everything it wrote is shown
    before the report, and the report quotes its very last lines."""
    n = 200_000
    r = jobs.run(["--nproc-per-node", 2, "--", *worker(f"seqerr={n}", "@1:exit=3", "sleep=30")])
    assert r.returncode == 3, r.stderr
    report = r.stderr[r.stderr.index("ddplaunch: job failed"):]
    assert f"  | 1:{n - 1}\n" in report, report
    shown = _sequences("\n".join(l for l in r.stderr.splitlines() if l.startswith("[rank 1]")))
    assert shown[1] == list(range(n))


def test_a_restart_after_a_flood_shows_the_next_round_whole(jobs, tmp_path):
    """Round 0 floods and fails; round 1 floods again through new pipes:
    each round's lines are whole, complete and in order."""
    n = 150_000
    script = (f'{worker(f"seq={n}")[0]} seq={n}; '
              f'[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 5; exit 0')
    r = jobs.run(["--nproc-per-node", 2, "--max-restarts", 1, "--", "sh", "-c", script])
    assert r.returncode == 0, r.stderr
    seen = collections.defaultdict(list)
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\[rank (\d)\]: (.*)", line)
        assert m, f"mangled line: {line[:200]!r}"
        seen[int(m.group(1))].append(m.group(2))
    assert sorted(seen) == [0, 1]
    for rank, shown in seen.items():
        # Round 0 may be cut short, its last line unfinished (the first rank
        # to fail stops the other); round 1 is complete.
        first = len(shown) - n
        assert first >= 0, rank
        assert shown[first:] == [f"{rank}:{k}" for k in range(n)], rank
        full = [f"{rank}:{k}" for k in range(first)]
        assert shown[:first] == full or (
            shown[:first - 1] == full[:-1] and full[-1].startswith(shown[first - 1])), rank
