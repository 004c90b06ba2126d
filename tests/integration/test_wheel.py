"""`pip install ddplaunch` (README, "Install"): the build's wheel, installed
into a fresh virtual environment as users do, runs README's PyTorch job
(real PyTorch, gloo) with the environment's own `ddplaunch`, and `pip
uninstall` leaves no file of it behind. README's lines are run as written,
from a directory that has the checkout's `build` and `examples`."""
import os
import re
import subprocess

import pytest
from conftest import BIN, SOURCE_DIR, needs_torch

pytestmark = pytest.mark.skipif(bool(os.environ.get("DDPLAUNCH_SANITIZE")),
                                reason="a sanitizer build makes no wheel")

BUILD = os.path.dirname(BIN)
# A Debian 12 user's PATH: /usr/bin/python3 is the one with python3-torch.
PATH = "/usr/local/bin:/usr/bin:/bin"


def readme_block(first_line):
    """The indented README block (a code block) whose first command starts
    with `first_line`, its lines without their comments."""
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        lines = f.read().splitlines()
    at = next(i for i, l in enumerate(lines) if l.lstrip().startswith(first_line))
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    block = []
    for line in lines[at:]:
        if not line.startswith(indent) or not line.strip():
            break
        block.append(re.sub(r"\s+#.*$", "", line[len(indent):]))
    return block


def files_under(path):
    return {os.path.join(top, name) for top, _, names in os.walk(path) for name in names}


@needs_torch
def test_the_wheel_installs_runs_pytorch_and_uninstalls_cleanly(jobs, tmp_path):
    r = subprocess.run(["cmake", "--build", BUILD, "--target", "wheel"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    os.symlink(BUILD, tmp_path / "build")
    os.symlink(os.path.join(SOURCE_DIR, "examples"), tmp_path / "examples")
    block = readme_block("python3 -m venv")
    assert len(block) == 3 and block[1].startswith("pip install build/dist/"), block
    venv_made, install, job = block
    env = jobs.env({"PATH": PATH})
    bash = lambda script: subprocess.run(["bash", "-ec", script], cwd=tmp_path, env=env,
                                         capture_output=True, text=True, timeout=600)
    r = bash(venv_made)
    assert r.returncode == 0, r.stderr
    before = files_under(tmp_path / "env")
    r = bash(f". env/bin/activate\n{install}")
    assert r.returncode == 0, r.stdout + r.stderr
    installed = tmp_path / "env" / "bin" / "ddplaunch"
    assert os.access(installed, os.X_OK)
    # The wheel's version is the binary's, and `python -m ddplaunch` is it too.
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout
    assert subprocess.run([installed, "--version"], capture_output=True,
                          text=True).stdout == version
    r = bash(f". env/bin/activate\npython -m ddplaunch --version\n"
             "python -c 'import ddplaunch; print(ddplaunch.__version__, ddplaunch.binary())'")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [version.strip(),
                                     f"{version.split()[1]} {installed}"], r.stdout
    # README's job, with the environment's ddplaunch first on PATH.
    r = bash(f". env/bin/activate\ncommand -v ddplaunch\n{job}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == str(installed), r.stdout
    assert len(re.findall(r"rank \d/2: all-reduce", r.stdout)) == 2, r.stdout + r.stderr
    r = bash(". env/bin/activate\npip uninstall -y ddplaunch")
    assert r.returncode == 0, r.stderr
    assert files_under(tmp_path / "env") == before, files_under(tmp_path / "env") - before
