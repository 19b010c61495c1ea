"""Stage results out: upload a file or a directory tree to object storage."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dask.utils import parse_bytes
from fsspec.callbacks import Callback, NoOpCallback

from dask_staging import layout
from dask_staging.engines import engine_for


def upload_plan(local: Path, url: str) -> list[tuple[Path, str]]:
    """(local file, remote URL) pairs for a file or every file under a directory."""
    if local.is_file():
        return [(local, url)]
    if not local.is_dir():
        raise FileNotFoundError(f"{local} does not exist")
    base = url.rstrip("/")
    return [
        (path, f"{base}/{path.relative_to(local).as_posix()}")
        for path in sorted(local.rglob("*"))
        if path.is_file()
    ]


def stage_out(
    local_path: str | os.PathLike,
    url: str,
    *,
    streams: int = 8,
    part_size: int | str = 16 << 20,
    files: int = 32,
    callback: Callback | None = None,
    **storage_options: Any,
) -> None:
    """Upload a file, or a directory tree under the prefix ``url``.

    Large files go up as multipart uploads with ``streams`` parts in flight;
    many files go up ``files`` at a time.  ``storage_options`` are the target
    protocol's options (``endpoint_url=``, ``key=``, ...).

    Examples
    --------
    >>> stage_out("results/", "s3://bucket/run-42/")  # doctest: +SKIP
    """
    local = Path(local_path)
    key = layout.normalize_url(url)
    plan = upload_plan(local, key)
    engine = engine_for(key.split("://", 1)[0], storage_options)
    part = parse_bytes(part_size) if isinstance(part_size, str) else part_size
    callback = callback or NoOpCallback()
    callback.set_size(sum(path.stat().st_size for path, _ in plan))

    def one(item: tuple[Path, str]) -> None:
        path, target = item
        engine.put_file(path, target, part_size=part, streams=streams)
        callback.relative_update(path.stat().st_size)

    with ThreadPoolExecutor(max(1, min(files, len(plan))), "staging-upload") as pool:
        list(pool.map(one, plan))
