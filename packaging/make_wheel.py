"""Builds ddplaunch's wheel from the built binary, offline: lays out the
wheel's tree (the binary as the wheel's script, so pip puts it on the
environment's PATH; the `ddplaunch` Python package for `python -m
ddplaunch`; the .dist-info) and packs it with Debian's python3-wheel
(`python3 -m wheel pack`, which writes RECORD). The platform tag is the
binary's glibc floor. Run by the build's `wheel` target:

    cmake --build build --target wheel    # build/dist/ddplaunch-*.whl
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

# The oldest glibc the binary starts on (src/posix/glibc_floor.c).
PLATFORM = "manylinux_2_31_x86_64"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--source", required=True, help="the checkout's root")
    ap.add_argument("--out", required=True)
    ap.add_argument("--platform", default=PLATFORM)
    args = ap.parse_args()
    name = f"ddplaunch-{args.version}"
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, name)
        package = os.path.join(tree, "ddplaunch")
        os.makedirs(package)
        for module in ("__init__.py", "__main__.py"):
            with open(os.path.join(args.source, "python", "ddplaunch", module)) as f:
                text = f.read().replace("@VERSION@", args.version)
            with open(os.path.join(package, module), "w") as f:
                f.write(text)
        scripts = os.path.join(tree, f"{name}.data", "scripts")
        os.makedirs(scripts)
        # Without its line tables: a quarter of the size (the Debian package
        # strips it too).
        subprocess.run(["strip", "--strip-debug", "-o", os.path.join(scripts, "ddplaunch"),
                        args.binary], check=True)
        os.chmod(os.path.join(scripts, "ddplaunch"), 0o755)
        info = os.path.join(tree, f"{name}.dist-info")
        os.makedirs(info)
        with open(os.path.join(args.source, "README.md")) as f:
            readme = f.read()
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\n"
                    "Name: ddplaunch\n"
                    f"Version: {args.version}\n"
                    "Summary: Launch and supervise distributed training workers "
                    "(torchrun and mpirun in one native binary)\n"
                    "License: see LICENSE\n"
                    "Requires-Python: >=3.8\n"
                    "Description-Content-Type: text/markdown\n\n" + readme)
        with open(os.path.join(info, "WHEEL"), "w") as f:
            f.write("Wheel-Version: 1.0\n"
                    "Generator: ddplaunch packaging/make_wheel.py\n"
                    "Root-Is-Purelib: false\n"
                    f"Tag: py3-none-{args.platform}\n")
        shutil.copy(os.path.join(args.source, "LICENSE"), os.path.join(info, "LICENSE"))
        os.makedirs(args.out, exist_ok=True)
        for old in os.listdir(args.out):
            if old.startswith("ddplaunch-") and old.endswith(".whl"):
                os.unlink(os.path.join(args.out, old))
        r = subprocess.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", args.out, tree],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"make_wheel: `python3 -m wheel pack` failed (Debian: python3-wheel): "
                     f"{r.stderr.strip()}")
    print(os.path.join(args.out, f"{name}-py3-none-{args.platform}.whl"))


if __name__ == "__main__":
    main()
