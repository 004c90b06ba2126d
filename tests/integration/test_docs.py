"""The docs agree with the program: README's option defaults are the ones the
binary shows in --help (which formats the defaults written in Config)."""
import os
import re

from conftest import SOURCE_DIR


def help_defaults(jobs):
    r = jobs.run(["--help"])
    assert r.returncode == 0
    defaults, flag = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"  (?:-\w, )?(--[\w-]+)", line)
        if m:
            flag = m.group(1)
        d = re.search(r"\[(.*)\]\s*$", line)
        if flag and d:
            defaults[flag] = d.group(1)
    return defaults


def readme_defaults():
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        rows = [l for l in f if l.startswith("| `--")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        if len(cells) < 3:
            continue
        flags = re.findall(r"`(?:-\w/)?(--[\w-]+)", cells[0])
        values = [v.strip() for v in cells[2].split(",")]
        if len(values) != len(flags):
            values = [cells[2]] + [""] * (len(flags) - 1)  # the default of the first flag
        out.update(zip(flags, values))
    return out


def test_readme_option_defaults_match_the_binary(jobs):
    shown = help_defaults(jobs)
    documented = readme_defaults()
    assert shown, "no defaults found in --help"
    compared = 0
    for flag, default in documented.items():
        if flag in shown and default:
            assert default.strip("`").strip() == shown[flag].strip(), \
                f"README says {flag} defaults to {default!r}, --help says {shown[flag]!r}"
            compared += 1
    assert compared >= 8, (documented, shown)


# Includes that run upward, each with why; the list only shrinks.
KNOWN_UPWARD_INCLUDES = set()


def test_every_include_follows_the_layer_order_of_the_architecture_table():
    """docs/ARCHITECTURE.md's layout table is the layer order: a file in
    src/<dir>/ includes only its own directory or those below it."""
    with open(os.path.join(SOURCE_DIR, "docs", "ARCHITECTURE.md")) as f:
        order = re.findall(r"^\| `src/([a-z]+)/` \|", f.read(), re.M)
    assert "agent" in order and "config" in order, order
    rank = {d: i for i, d in enumerate(order)}
    upward = set()
    for top, _, files in os.walk(os.path.join(SOURCE_DIR, "src")):
        for name in files:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, SOURCE_DIR)
            parts = rel.split(os.sep)
            if len(parts) < 3 or parts[1] not in rank or not name.endswith((".cpp", ".hpp")):
                continue
            with open(path) as f:
                for target in re.findall(r'^#include "([a-z_]+)/', f.read(), re.M):
                    if target in rank and rank[target] < rank[parts[1]]:
                        upward.add((rel, target))
    assert upward <= KNOWN_UPWARD_INCLUDES, sorted(upward - KNOWN_UPWARD_INCLUDES)
