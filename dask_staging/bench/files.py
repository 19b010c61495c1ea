"""Sequential write and read rates of a directory (node-local disk, scratch file system)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from dask_staging.bench.budget import Budget

BLOCK = 8 << 20


def _write(path: Path, size: int, block: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
        os.fsync(fd)  # the rate of data on the device, not in the page cache
        _drop_cached_pages(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    total = 0
    try:
        buffer = bytearray(BLOCK)
        view = memoryview(buffer)
        while n := os.readv(fd, [view]):
            total += n
        _drop_cached_pages(fd)
    finally:
        os.close(fd)
    return total


def _drop_cached_pages(fd: int) -> None:
    """Ask the kernel to forget the file's cached pages so the next read hits the device."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def measure_fs(directory: str, budget: Budget, *, size: int) -> None:
    """Write then read one file of ``size`` bytes in ``directory``; the file is removed."""
    root = Path(os.path.expandvars(directory)).expanduser()
    if not root.is_dir():
        raise ValueError(f"{directory} is not a directory")
    path = root / f".dask-staging-bench-{uuid.uuid4().hex}"
    block = os.urandom(BLOCK)
    common = {"tier": "fs", "target": str(root), "bytes": size, "object_size": size}
    try:
        if budget.measure(
            f"write {root}",
            lambda: _write(path, size, block),
            op="write",
            method="sequential write + fsync",
            **common,
        ):
            budget.measure(
                f"read {root}", lambda: _read(path), op="read", method="sequential read", **common
            )
    finally:
        path.unlink(missing_ok=True)
