# Written by ddplaunch for --python-stacks-signal into the job's directory,
# first on the workers' PYTHONPATH; removed with the job. `ddplaunch stacks`
# sends this process the signal named in the file `stacks.conf` beside this
# one (first line: the signal's number; second: a directory) and reads
# every thread's Python stack from <directory>/<pid>. Then the
# sitecustomize this one hides runs.


def _ddplaunch_python_stacks():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import atexit
        import faulthandler

        with open(os.path.join(here, "stacks.conf"), encoding="utf-8") as conf:
            signum, dump_dir = conf.read().split("\n", 1)
        signum = int(signum)
        mine = {}  # this process's file: a forked child makes its own

        def arm():
            try:
                mine["pid"] = os.getpid()
                mine["path"] = os.path.join(dump_dir, str(mine["pid"]))
                dump = open(mine["path"], "a")
                faulthandler.register(signum, file=dump, all_threads=True, chain=False)
            except (OSError, RuntimeError, ValueError):
                pass

        def disarm():
            if mine.get("pid") == os.getpid():
                try:
                    os.remove(mine["path"])
                except OSError:
                    pass

        arm()
        atexit.register(disarm)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=arm)
    except Exception:
        pass
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if isinstance(p, str) and os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_ddplaunch_python_stacks()
del _ddplaunch_python_stacks
