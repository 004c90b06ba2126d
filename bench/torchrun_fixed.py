"""Runs Debian's torchrun 1.13 unchanged except for one parsing bug.

On Python 3.11, iterating an IntFlag yields only its single-bit members: it
skips 0 (NONE) and 3 (ALL). torchrun's Std.from_str() looks values up that
way, so "--redirects 0" (its default) and "--tee 3" give None and torchrun
crashes. This wrapper turns a plain number into Std(number), which is what
from_str meant, and runs torchrun's own main(). Mappings ("0:3,1:0") go
through the original parser, whose per-entry lookup is patched the same way.
"""
import re
import sys

import torch.distributed.elastic.multiprocessing.api as api

_original = api.Std.from_str.__func__


def _from_str(cls, vm):
    vm = vm.strip()
    if re.fullmatch(r"\d", vm):
        return api.Std(int(vm))
    if re.fullmatch(r"(\d:\d,)*\d:\d", vm):
        return {int(k): api.Std(int(v)) for k, v in (pair.split(":") for pair in vm.split(","))}
    return _original(cls, vm)


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
