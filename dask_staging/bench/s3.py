"""S3 read and write rates by stream count and object size, and for many small objects."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from dask.utils import format_bytes

from dask_staging import layout
from dask_staging.bench.budget import Budget
from dask_staging.cache import Cache
from dask_staging.upload import stage_out


def _fill(path: Path, size: int) -> None:
    block = os.urandom(min(size, 16 << 20)) or b""
    with open(path, "wb") as f:
        left = size
        while left > 0:
            left -= f.write(block[: min(left, len(block))])


def measure_s3(
    prefix: str,
    budget: Budget,
    *,
    work: Path,
    sizes: Sequence[int],
    streams: Sequence[int],
    small_objects: int,
    small_size: int,
    storage_options: dict,
) -> None:
    """Upload and stage test objects under a fresh key below ``prefix``, then delete them."""
    if not prefix.startswith("s3://"):
        raise ValueError(f"--s3 must be an s3://bucket/prefix URL, not {prefix!r}")
    base = layout.normalize_url(prefix).rstrip("/") + f"/dask-staging-bench-{uuid.uuid4().hex[:12]}"
    endpoint = storage_options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL", "AWS")
    target = f"{endpoint} {prefix}"
    try:
        for size in sorted(sizes):
            if budget.allows(f"S3 objects of {format_bytes(size)}", size):
                _one_size(base, budget, work, size, streams, target, storage_options)
        _many_small(base, budget, work, small_objects, small_size, target, storage_options)
    finally:
        _delete(base, storage_options)


def _one_size(base, budget, work, size, streams, target, storage_options) -> None:
    """PUT then GET one object of ``size`` with each stream count."""
    local = work / f"object-{size}"
    _fill(local, size)
    url = f"{base}/object-{size}"
    common = {"tier": "s3", "target": target, "bytes": size, "object_size": size}
    for n in streams:
        budget.measure(
            f"S3 PUT {format_bytes(size)} x {n} streams",
            lambda n=n: stage_out(
                local, url, streams=n, part_size=_part_size(size, n, 5 << 20), **storage_options
            ),
            op="write",
            method="multipart PUT",
            streams=n,
            **common,
        )
    for n in streams:
        cache = Cache(
            work / f"cache-{n}",
            streams=n,
            part_size=_part_size(size, n, 256 << 10),
            **_cache_options(storage_options),
        )

        def read(cache=cache):
            cache.evict(url)
            cache.get(url)

        try:
            budget.measure(
                f"S3 GET {format_bytes(size)} x {n} streams",
                read,
                op="read",
                method="ranged GET",
                streams=n,
                **common,
            )
        finally:
            cache.evict(url)
            cache.close()
    local.unlink()


def _part_size(size: int, streams: int, smallest: int) -> int:
    """Parts small enough that ``streams`` of them can be in flight (S3 needs 5 MiB to PUT)."""
    return max(smallest, -(-size // streams))


def _cache_options(storage_options: dict) -> dict:
    return {"s3": storage_options} if storage_options else {}


def _many_small(base, budget, work, count, size, target, storage_options) -> None:
    if count <= 0 or not budget.allows(f"{count} small objects", count * size):
        return
    folder = work / "small"
    folder.mkdir()
    for i in range(count):
        _fill(folder / f"{i:06d}.bin", size)
    url = f"{base}/small/"
    common = {
        "tier": "s3",
        "target": target,
        "bytes": count * size,
        "object_size": size,
        "objects": count,
    }
    budget.measure(
        f"S3 PUT {count} x {format_bytes(size)}",
        lambda: stage_out(folder, url, **storage_options),
        op="write",
        method="PUT, many objects",
        **common,
    )
    urls = [f"{url}{i:06d}.bin" for i in range(count)]
    cache = Cache(work / "cache-small", **_cache_options(storage_options))
    try:

        def read():
            cache.evict()
            cache.stage(urls)

        budget.measure(
            f"S3 GET {count} x {format_bytes(size)}",
            read,
            op="read",
            method="GET, many objects",
            **common,
        )
    finally:
        cache.close()


def _delete(base: str, storage_options: dict) -> None:
    import fsspec

    fs = fsspec.filesystem("s3", **storage_options)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(base, recursive=True)
