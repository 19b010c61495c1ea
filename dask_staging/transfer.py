"""Multi-stream download of one object into a local temp file, on threads.

The first request asks for the first part and learns the object's size and
ETag from its answer (no separate HEAD: that round trip matters on a 10 ms
link).  Small objects are then complete; large ones are fetched as ranged GETs
on a pool of ``streams`` threads, each pinned to the ETag, written in place
with ``pwrite`` and hashed as they arrive.  A part that fails midway resumes
from the last byte written, with capped exponential backoff; the other parts
carry on.

Threads, not asyncio: obstore's blocking calls release the GIL, and without an
event loop in between each object costs a fraction of the Python work
(measured 3,400 vs 2,200 small objects/s on two cores).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Executor, wait
from dataclasses import dataclass
from typing import Protocol

from dask_staging import checksum, failpoints
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
    on_retry : callable, optional
        Called once per retried request (the cache counts them).
    """

    part_size: int = 16 << 20
    streams: int = 8
    retries: int = 5
    backoff: float = 0.1
    max_backoff: float = 5.0
    on_retry: Callable[[], None] | None = None

    def retrying(self, attempt: int) -> None:
        """Count a retry and wait before it (full-jitter exponential backoff)."""
        if self.on_retry is not None:
            self.on_retry()
        time.sleep(backoff_delay(attempt, self))


class Body(Protocol):
    """The body of a GET, read either in chunks or whole."""

    def chunks(self) -> Iterator:
        """The bytes in chunks of a few MiB."""

    def read(self):
        """All the bytes at once (a buffer)."""


class RangeSource(Protocol):
    """What an engine offers to the downloader."""

    def open_range(
        self, url: str, start: int, end: int, etag: str | None
    ) -> tuple[ObjectInfo, Body]:
        """Start a GET of bytes ``[start, end)``; returns the object info and the body."""

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


class _Aborted(Exception):
    """Another part of the same object failed; stop quietly."""


def download(
    source: RangeSource,
    url: str,
    dest: str,
    final: str,
    cfg: TransferConfig,
    *,
    parts: Executor,
    on_size: Callable[[ObjectInfo], None] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> ObjectInfo:
    """Download ``url`` into the new temp file ``dest``, then rename it to ``final``.

    Parts of large objects run on the ``parts`` executor.  ``on_size`` is
    called once the size is known and before any byte is written (the cache
    makes room there).  On any error ``dest`` is removed.  Returns the
    object's info with its checksum.
    """
    info, first = _with_retries(
        lambda: source.open_range(url, 0, cfg.part_size, None), source, url, cfg
    )
    if on_size is not None:
        on_size(info)
    if info.size <= cfg.part_size:
        return _download_small(source, url, dest, final, info, first, cfg, on_bytes)

    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    failed = threading.Event()
    try:
        try:
            os.posix_fallocate(fd, 0, info.size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _disk_full(url, info.size) from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise

        def fetch(start: int, end: int, body: Body | None) -> bytes:
            hasher = checksum.new_part_hasher()

            def write(chunk, offset: int) -> None:
                if failed.is_set():
                    raise _Aborted
                _pwrite(fd, chunk, offset, hasher)

            _copy_part(source, url, start, end, info, body, cfg, write, on_bytes)
            return hasher.digest()

        futures = [
            parts.submit(fetch, start, end, first if i == 0 else None)
            for i, (start, end) in enumerate(plan_parts(info.size, cfg.part_size))
        ]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        errors = [f.exception() for f in done if f.exception() is not None]
        if errors:
            failed.set()
            for future in futures:
                future.cancel()
            wait(futures)
            raise errors[0]
        digests = [f.result() for f in futures]
    except BaseException:
        failed.set()
        os.close(fd)
        remove_file(dest)
        raise
    os.close(fd)
    _move_into_place(dest, final)
    return ObjectInfo(info.size, info.etag, info.version, checksum.combine(cfg.part_size, digests))


def _download_small(source, url, dest, final, info, first, cfg, on_bytes) -> ObjectInfo:
    """One part: read it whole, then write, hash and rename it."""
    bodies = [first]

    def read():
        body = bodies.pop() if bodies else None
        if body is None:
            _, body = source.open_range(url, 0, cfg.part_size, info.etag)
        data = body.read()
        if len(data) != info.size:
            raise ConnectionError(f"got {len(data)} bytes, expected {info.size}")
        return data

    data = _with_retries(read, source, url, cfg)
    try:
        digest = _write_file(dest, final, data)
    except OSError as exc:
        remove_file(dest)
        if exc.errno == errno.ENOSPC:
            raise _disk_full(url, info.size) from None
        raise
    if on_bytes is not None:
        on_bytes(info.size)
    return ObjectInfo(info.size, info.etag, info.version, checksum.combine(cfg.part_size, [digest]))


def _copy_part(source, url, start, end, info, body, cfg, write, on_bytes) -> None:
    """Stream bytes ``[start, end)`` to ``write(chunk, offset)``, resuming after failures."""
    offset = start
    attempt = 0
    while True:
        try:
            if body is None:
                _, body = source.open_range(url, offset, end, info.etag)
            for chunk in body.chunks():
                n = len(chunk)
                if offset + n > end:
                    raise TransferError(f"the server sent more bytes than asked for {url}")
                write(chunk, offset)
                offset += n
                failpoints.reach("download")
                if on_bytes is not None:
                    on_bytes(n)
            if offset != end:
                raise ConnectionError(f"stream ended at byte {offset}, expected {end}")
            return
        except (StagingError, _Aborted):
            raise
        except Exception as exc:
            if getattr(exc, "errno", None) == errno.ENOSPC:
                raise _disk_full(url, info.size) from None
            if source.is_permanent(exc) or attempt >= cfg.retries:
                raise source.translate(exc, url) from None
            body = None
            cfg.retrying(attempt)
            attempt += 1


def _with_retries(make, source, url, cfg):
    attempt = 0
    while True:
        try:
            return make()
        except StagingError:
            raise
        except Exception as exc:
            if source.is_permanent(exc) or attempt >= cfg.retries:
                raise source.translate(exc, url) from None
            cfg.retrying(attempt)
            attempt += 1


def _write_file(dest: str, final: str, data) -> bytes:
    """Write ``data`` to the new file ``dest``, rename it to ``final``; return the digest."""
    hasher = checksum.new_part_hasher()
    hasher.update(data)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    failpoints.reach("download")
    _move_into_place(dest, final)
    return hasher.digest()


def _move_into_place(temp: str, final: str) -> None:
    """Atomically publish ``temp`` as ``final``, creating its directory on first use."""
    try:
        os.replace(temp, final)
    except FileNotFoundError:
        if not os.path.exists(temp):
            raise
        os.makedirs(os.path.dirname(final), mode=0o700, exist_ok=True)
        os.replace(temp, final)


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
    """Delete the file or directory tree ``path`` if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
