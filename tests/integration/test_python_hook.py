"""--python-stacks-signal's hook (src/agent/sitecustomize.py) run as Python,
as the tree holds it and ddplaunch writes it: set up beside a stacks.conf,
it answers the signal with every thread's stack in a file of its own, a
forked child gets its own file, each file goes when its process exits, and
the sitecustomize it hides still runs. The launcher's side (the signal, the
reading) is tested in test_stacks.py."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

SOURCE = Path(os.environ.get("DDPLAUNCH_SOURCE_DIR", Path(__file__).resolve().parents[2]))
HOOK = SOURCE / "src" / "agent" / "sitecustomize.py"


def _arm(tmp_path, signum):
    """The job directory's layout: python/sitecustomize.py, python/stacks.conf, python-stacks/."""
    hook_dir = tmp_path / "python"
    dump_dir = tmp_path / "python-stacks"
    hook_dir.mkdir()
    dump_dir.mkdir()
    shutil.copy(HOOK, hook_dir / "sitecustomize.py")
    (hook_dir / "stacks.conf").write_text(f"{signum}\n{dump_dir}")
    return hook_dir, dump_dir


PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    dump_dir = sys.argv[1]

    def wait_for_dump(pid):
        path = os.path.join(dump_dir, str(pid))
        for _ in range(500):
            with open(path) as f:
                text = f.read()
            if "Current thread" in text or "Thread 0x" in text:
                return text
            time.sleep(0.01)
        return ""

    def parent_frame_name():
        os.kill(os.getpid(), int(sys.argv[2]))
        return wait_for_dump(os.getpid())

    print("PARENT", "parent_frame_name" in parent_frame_name(), flush=True)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        def child_frame_name():
            os.kill(os.getpid(), int(sys.argv[2]))
            return wait_for_dump(os.getpid())
        os.write(w, b"1" if "child_frame_name" in child_frame_name() else b"0")
        sys.exit(0)  # atexit runs: the child removes its own file
    os.waitpid(child, 0)
    print("CHILD", os.read(r, 1) == b"1", flush=True)
    print("CHILD_FILE_GONE", not os.path.exists(os.path.join(dump_dir, str(child))), flush=True)
    print("MY_FILE", os.path.exists(os.path.join(dump_dir, str(os.getpid()))), flush=True)
""")


def test_the_hook_answers_the_signal_in_its_own_file_and_a_forked_child_in_its_own(tmp_path):
    signum = int(signal.SIGUSR2)
    hook_dir, dump_dir = _arm(tmp_path, signum)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=str(hook_dir))
    done = subprocess.run([sys.executable, str(script), str(dump_dir), str(signum)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "PARENT True" in done.stdout, done.stdout
    assert "CHILD True" in done.stdout, done.stdout
    assert "CHILD_FILE_GONE True" in done.stdout, done.stdout
    assert "MY_FILE True" in done.stdout, done.stdout
    # The frames went to the files, not to the program's own stderr.
    assert "parent_frame_name" not in done.stderr
    # At exit, the parent's file went too.
    assert list(dump_dir.iterdir()) == []


def test_the_sitecustomize_it_hides_still_runs(tmp_path):
    hook_dir, dump_dir = _arm(tmp_path, int(signal.SIGUSR2))
    users = tmp_path / "users"
    users.mkdir()
    (users / "sitecustomize.py").write_text("import os\nos.environ['USERS_SITE'] = __file__\n")
    env = dict(os.environ, PYTHONPATH=f"{hook_dir}:{users}")
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('USERS_SITE'))"], env=env,
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(users / "sitecustomize.py")


def test_a_missing_or_broken_conf_leaves_the_program_alone(tmp_path):
    hook_dir, _ = _arm(tmp_path, int(signal.SIGUSR2))
    (hook_dir / "stacks.conf").write_text("not a signal\n\x00\xff")
    env = dict(os.environ, PYTHONPATH=str(hook_dir))
    done = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ran\n", "")
    (hook_dir / "stacks.conf").unlink()
    done = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ran\n", "")
