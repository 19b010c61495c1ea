"""Where a URL's file lives inside the cache root.

Names are a hash of the normalised URL, fanned out over 256 subdirectories
(made once with the root, so publishing a file is one rename), so no remote
key (``../``, absolute paths, unicode look-alikes, NUL bytes) can choose a
path.  A short sanitised suffix of the key is kept so that readers that
dispatch on the file extension (xarray, pandas) still work.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path

from dask_staging import owner

DATA = "data"
TMP = "tmp"
_SUFFIX = re.compile(r"\.([A-Za-z0-9]{1,12})$")
_ALIASES = {"s3a": "s3", "s3n": "s3"}


def normalize_url(url: str) -> str:
    """``protocol://bucket/key`` with aliases folded (``s3a`` → ``s3``) and no trailing ``/``."""
    if "::" in url:
        raise ValueError(f"chained URL {url!r} cannot be cached directly; pass the inner URL")
    protocol, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"URL {url!r} has no protocol; write it as s3://bucket/key")
    protocol = _ALIASES.get(protocol.lower(), protocol.lower())
    rest = rest.lstrip("/") if protocol != "file" else "/" + rest.lstrip("/")
    if not rest.strip("/"):
        raise ValueError(f"URL {url!r} names no object")
    return f"{protocol}://{rest}"


def url_hash(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def relative_path(url: str) -> str:
    """Path of ``url``'s file relative to the cache root."""
    digest = url_hash(url)
    if url.startswith("sql+"):  # a staged query result
        return f"{DATA}/{digest[:2]}/{digest}.parquet"
    match = _SUFFIX.search(url.rsplit("/", 1)[-1])
    suffix = "." + match.group(1).lower() if match else ""
    return f"{DATA}/{digest[:2]}/{digest}{suffix}"


FANOUT = [f"{DATA}/{i:02x}" for i in range(256)]


def temp_path(url: str) -> str:
    """A fresh temp file name for a download of ``url``, relative to the root.

    It carries the host and pid so that a sweep can tell abandoned files.
    """
    host = re.sub(r"[^A-Za-z0-9.-]", "_", owner.hostname())
    return f"{TMP}/{url_hash(url)}.{host}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"


def parse_temp_name(name: str) -> tuple[str, int] | None:
    """(host, pid) of a temp file name made by :func:`temp_path`."""
    parts = name.split(".")
    if len(parts) < 5 or parts[-1] != "part":
        return None
    try:
        return ".".join(parts[1:-3]), int(parts[-3])
    except ValueError:
        return None


def inside(root: Path, relative: str) -> str:
    """Absolute path of ``relative`` under the resolved ``root``; refuses anything outside it."""
    path = os.path.normpath(f"{root}/{relative}")
    if "\x00" in relative or not path.startswith(f"{root}{os.sep}"):
        raise ValueError(f"cache path {relative!r} resolves outside the cache root {root}")
    return path
