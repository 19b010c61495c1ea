"""Multi-stream download of one object into a local temp file.

The first request asks for the first part and learns the object's size and
ETag from its answer (no separate HEAD: that round trip matters on a 10 ms
link).  Small objects are then complete; large ones are fetched as ranged GETs
over ``streams`` concurrent requests, each pinned to the ETag, written in place
with ``pwrite`` and hashed as they arrive.  A part that fails midway resumes
from the last byte written, with capped exponential backoff; the other parts
carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from dask_staging import checksum
from dask_staging.errors import DiskFullError, StagingError, TransferError


@dataclass(frozen=True)
class ObjectInfo:
    """What a remote store says about an object (and, after a download, its checksum)."""

    size: int
    etag: str | None = None
    version: str | None = None
    checksum: str | None = None


@dataclass(frozen=True)
class TransferConfig:
    """Tunables of a transfer.

    Parameters
    ----------
    part_size : int
        Bytes per ranged GET (and per checksum part).
    streams : int
        Concurrent ranged GETs per object.
    retries : int
        Attempts per part after the first, resuming where the last one stopped.
    backoff, max_backoff : float
        First and largest pause between attempts, in seconds (jittered).
    chunk_size : int
        Bytes handed to the writer at a time.
    """

    part_size: int = 16 << 20
    streams: int = 8
    retries: int = 5
    backoff: float = 0.1
    max_backoff: float = 5.0
    chunk_size: int = 8 << 20


class RangeSource(Protocol):
    """What an engine offers to the downloader."""

    async def open_range(
        self, url: str, start: int, end: int, etag: str | None
    ) -> tuple[ObjectInfo, AsyncIterator]:
        """Start a GET of bytes ``[start, end)``; returns the object info and a chunk stream."""

    def is_permanent(self, exc: BaseException) -> bool:
        """Whether retrying after ``exc`` is pointless."""

    def translate(self, exc: BaseException, url: str) -> BaseException:
        """One clear error for ``exc``."""


def plan_parts(size: int, part_size: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` covering ``size`` bytes in parts of ``part_size``."""
    if size == 0:
        return [(0, 0)]
    return [(start, min(start + part_size, size)) for start in range(0, size, part_size)]


def backoff_delay(attempt: int, cfg: TransferConfig) -> float:
    """Full-jitter exponential backoff, capped."""
    return random.uniform(0, min(cfg.max_backoff, cfg.backoff * 2**attempt))


async def download(
    source: RangeSource,
    url: str,
    dest: str,
    cfg: TransferConfig,
    *,
    requests: asyncio.Semaphore,
    on_size: Callable[[ObjectInfo], Awaitable[None]] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> ObjectInfo:
    """Download ``url`` into the new file ``dest``; return its info with checksum.

    ``on_size`` is awaited once the size is known and before any byte is
    written (the cache makes room there).  On any error ``dest`` is removed.
    """
    loop = asyncio.get_running_loop()
    async with requests:
        info, first = await _with_retries(
            lambda: source.open_range(url, 0, cfg.part_size, None), source, url, cfg
        )
    if on_size is not None:
        await on_size(info)
    if info.size <= cfg.part_size:
        return await _download_small(source, url, dest, info, first, cfg, requests, on_bytes)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            await loop.run_in_executor(None, os.posix_fallocate, fd, 0, info.size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _disk_full(url, info.size) from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise

        streams = asyncio.Semaphore(cfg.streams)

        async def fetch(index: int, start: int, end: int) -> bytes:
            hasher = checksum.new_part_hasher()

            async def write(chunk, offset: int) -> None:
                await loop.run_in_executor(None, _pwrite, fd, chunk, offset, hasher)

            async with streams, requests:
                stream = first if index == 0 else None
                await _copy_part(source, url, start, end, info, stream, cfg, write, on_bytes)
            return hasher.digest()

        parts = plan_parts(info.size, cfg.part_size)
        tasks = [asyncio.ensure_future(fetch(i, s, e)) for i, (s, e) in enumerate(parts)]
        try:
            digests = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    except BaseException:
        os.close(fd)
        remove_file(dest)
        raise
    os.close(fd)
    return ObjectInfo(info.size, info.etag, info.version, checksum.combine(cfg.part_size, digests))


async def _download_small(source, url, dest, info, first, cfg, requests, on_bytes) -> ObjectInfo:
    """One part: gather it in memory, then write and hash it in one thread hop.

    Hashing happens off the event loop: the hash function releases the GIL,
    and taking it back on the loop thread can cost a whole switch interval.
    """
    chunks: list = []

    async def keep(chunk, offset: int) -> None:
        chunks.append(chunk)  # a resumed stream continues at the end of what was kept

    async with requests:
        await _copy_part(source, url, 0, info.size, info, first, cfg, keep, on_bytes)
    try:
        digest = await asyncio.get_running_loop().run_in_executor(None, _write_file, dest, chunks)
    except OSError as exc:
        remove_file(dest)
        if exc.errno == errno.ENOSPC:
            raise _disk_full(url, info.size) from None
        raise
    return ObjectInfo(info.size, info.etag, info.version, checksum.combine(cfg.part_size, [digest]))


async def _copy_part(source, url, start, end, info, stream, cfg, write, on_bytes) -> None:
    """Stream bytes ``[start, end)`` to ``write(chunk, offset)``, resuming after failures."""
    offset = start
    attempt = 0
    while True:
        try:
            if stream is None:
                _, stream = await source.open_range(url, offset, end, info.etag)
            async for chunk in stream:
                n = len(chunk)
                if offset + n > end:
                    raise TransferError(f"the server sent more bytes than asked for {url}")
                await write(chunk, offset)
                offset += n
                if on_bytes is not None:
                    on_bytes(n)
            if offset != end:
                raise ConnectionError(f"stream ended at byte {offset}, expected {end}")
            return
        except asyncio.CancelledError:
            raise
        except StagingError:
            raise
        except Exception as exc:
            if getattr(exc, "errno", None) == errno.ENOSPC:
                raise _disk_full(url, info.size) from None
            if source.is_permanent(exc) or attempt >= cfg.retries:
                raise source.translate(exc, url) from None
            stream = None
            await asyncio.sleep(backoff_delay(attempt, cfg))
            attempt += 1


async def _with_retries(make, source, url, cfg):
    attempt = 0
    while True:
        try:
            return await make()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if source.is_permanent(exc) or attempt >= cfg.retries:
                raise source.translate(exc, url) from None
            await asyncio.sleep(backoff_delay(attempt, cfg))
            attempt += 1


def _write_file(dest: str, chunks: list) -> bytes:
    """Write ``chunks`` to the new file ``dest``; returns their part digest."""
    hasher = checksum.new_part_hasher()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for chunk in chunks:
            hasher.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return hasher.digest()


def _pwrite(fd: int, chunk, offset: int, hasher) -> None:
    view = memoryview(chunk)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
    hasher.update(chunk)


def _disk_full(what: str, size: int) -> DiskFullError:
    return DiskFullError(f"no space left on the cache disk for {what} ({size} bytes)", size)


def remove_file(path: str | os.PathLike) -> None:
    """Delete ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
