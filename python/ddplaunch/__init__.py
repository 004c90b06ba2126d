"""ddplaunch, installed with pip: the native launcher binary, put on the
environment's PATH by the wheel (its scripts), and `python -m ddplaunch`.
Nothing here imports torch or anything else outside the standard library."""
import os
import shutil
import sys
import sysconfig

__all__ = ["binary", "__version__"]

__version__ = "@VERSION@"


def binary():
    """The path of the ddplaunch binary this package installed."""
    schemes = [sysconfig.get_default_scheme()]
    if sys.flags.no_user_site == 0:
        schemes.append(f"{os.name}_user")
    for scheme in schemes:
        try:
            path = os.path.join(sysconfig.get_path("scripts", scheme), "ddplaunch")
        except KeyError:
            continue
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("ddplaunch")
    if found:
        return found
    raise FileNotFoundError("the ddplaunch binary is not where pip put it: "
                            "reinstall with `pip install --force-reinstall ddplaunch`")
