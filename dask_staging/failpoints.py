"""Failpoints: named places where a test can make this process die, as ``kill -9`` would.

``DASK_STAGING_FAILPOINTS="publish:3,evict"`` kills the process (SIGKILL, no
clean-up) the 3rd time it reaches ``publish`` and the first time it reaches
``evict``.  Unset (always, outside the fault-injection tests), :func:`reach`
is one dictionary lookup.

The places:

``download``
    after the first bytes of a download were written to its temp file;
``publish``
    after downloaded files were renamed into place, before the index records them;
``evict``
    after the first file of an eviction was deleted, before the index commits.
"""

from __future__ import annotations

import os
import signal

_armed: dict[str, int] = {}
for _item in filter(None, os.environ.get("DASK_STAGING_FAILPOINTS", "").split(",")):
    _name, _, _count = _item.partition(":")
    _armed[_name.strip()] = int(_count or 1)


def reach(name: str) -> None:
    """Die here if the failpoint ``name`` is armed and its count is used up."""
    if name in _armed:
        _armed[name] -= 1
        if _armed[name] <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
