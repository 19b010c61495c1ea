"""Dask configuration for dask_staging: the ``staging`` namespace.

Defaults ship in ``staging.yaml`` (with ``staging-schema.yaml``); every key can
be set in Dask's YAML files or as ``DASK_STAGING__ROOT``, ``DASK_STAGING__MAX_BYTES``
and so on.  Roots are resolved on the worker that uses them.
"""

from __future__ import annotations

import os
from typing import Any

import dask.config
import yaml
from dask.utils import format_bytes, parse_bytes

from dask_staging.errors import StagingError

_here = os.path.dirname(__file__)


def _load_defaults() -> None:
    with open(os.path.join(_here, "staging.yaml")) as f:
        dask.config.update_defaults(yaml.safe_load(f))


_load_defaults()


def get(name: str, value: Any = None) -> Any:
    """``value`` if given, else ``staging.<name>`` from Dask's config."""
    return value if value is not None else dask.config.get(f"staging.{name}", default=None)


def cache_options(**given: Any) -> dict[str, Any]:
    """Keyword arguments for :class:`~dask_staging.Cache` from ``given`` and the config."""
    names = {
        "max_bytes": "max-bytes",
        "streams": "streams",
        "part_size": "part-size",
        "transfers": "transfers",
        "index_url": "index-url",
        "revalidate": "revalidate",
    }
    out = {key: get(name, given.get(key)) for key, name in names.items()}
    return {k: v for k, v in out.items() if v is not None}


def resolve_root(root: str | list[str] | None = None, min_free: int | str | None = None) -> str:
    """The cache root to use on this node.

    ``$VARS`` and ``~`` are expanded here (on the worker).  With a list, the
    first root that can be created, is writable and has ``min_free`` bytes
    free wins; if none qualifies the error says why each was skipped.
    """
    from dask_staging.fs import default_root

    candidates = get("root", root) or default_root()
    if isinstance(candidates, str):
        candidates = [candidates]
    needed = get("min-free", min_free)
    needed = parse_bytes(needed) if isinstance(needed, str) else int(needed or 0)
    reasons = []
    for candidate in candidates:
        path = os.path.expanduser(os.path.expandvars(str(candidate)))
        if "$" in path:
            reasons.append(f"{candidate} (an environment variable in it is not set)")
            continue
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            reasons.append(f"{path} ({exc.strerror.lower()})")
            continue
        if not os.access(path, os.W_OK | os.X_OK):
            reasons.append(f"{path} (not writable)")
            continue
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
        if free < needed:
            reasons.append(f"{path} (only {format_bytes(free)} free, need {format_bytes(needed)})")
            continue
        return path
    raise StagingError("no usable cache root: " + "; ".join(reasons))
