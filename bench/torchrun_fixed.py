"""Runs Debian's torchrun 1.13 unchanged except for one parsing bug.

On Python 3.11, iterating an IntFlag skips the zero member, so torchrun's
Std.from_str("0") (its default --redirects/--tee) returns None and torchrun
crashes. This wrapper maps "0" to Std.NONE and runs torchrun's own main().
"""
import sys

import torch.distributed.elastic.multiprocessing.api as api

_original = api.Std.from_str.__func__


def _from_str(cls, vm):
    return api.Std.NONE if vm.strip() == "0" else _original(cls, vm)


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
