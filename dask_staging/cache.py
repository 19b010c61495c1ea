"""The node-local staging cache.

``Cache`` ties together the index (:mod:`dask_staging.index`), the on-disk
layout (:mod:`dask_staging.layout`) and the transfer engines.  Several threads
and processes may use one root at once: exactly one of them downloads a given
URL, into a temp file that is renamed into place only when complete; the
others wait and then read the same file.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import io
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from dask.utils import format_bytes, parse_bytes
from fsspec.callbacks import Callback, NoOpCallback

from dask_staging import checksum, failpoints, layout, owner
from dask_staging.engines import engine_for
from dask_staging.errors import (
    CacheFullError,
    DiskFullError,
    EntryInUseError,
    RemoteNotFoundError,
    StagingError,
)
from dask_staging.index import READY, CacheIndex, Entry
from dask_staging.transfer import ObjectInfo, TransferConfig, download, remove_file

logger = logging.getLogger("dask_staging")

TOUCH_INTERVAL = 1.0  # seconds between writes of access times to the index
EVICTION_PATIENCE = 10.0  # seconds of trying to make room before the cache is full


def parse_revalidate(value: str | float | None) -> float | None:
    """``"never"``/None → None, ``"always"`` → 0, a number → seconds."""
    if value is None or value == "never":
        return None
    if value == "always":
        return 0.0
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"revalidate must be 'never', 'always' or a number of seconds, not {value!r}"
        ) from None
    if seconds < 0:
        raise ValueError(f"revalidate must not be negative, got {value!r}")
    return seconds


class Cache:
    """A cache of remote objects on local disk.

    Parameters
    ----------
    root : str or Path
        Cache directory (node-local disk or shared scratch); created 0700 if missing.
        ``~`` and ``$VARS`` are expanded.
    max_bytes : int or str, optional
        Size limit (``"50 GiB"`` works).  Least recently used entries are evicted
        down to ``low_watermark * max_bytes`` when a new object would exceed it.
    streams : int
        Concurrent ranged GETs per large object.
    index_url : str, optional
        SQLAlchemy URL of the index; default a SQLite file inside ``root``.
    part_size : int or str
        Bytes per ranged GET.
    transfers : int
        Objects (and requests) in flight at once when staging many objects.
    revalidate : "never", "always" or float
        When to compare a cached copy with the remote ETag: never, on every
        access, or when the last check is older than this many seconds.
    low_watermark : float
        Fraction of ``max_bytes`` that eviction frees down to.
    lease : float
        Seconds a download claim survives without a heartbeat (matters only
        for owners on other hosts; dead local owners are detected at once).
    retries : int
        Attempts per part after the first.
    **storage_options
        Per-protocol fsspec options, e.g. ``s3={"endpoint_url": ...}``.

    Examples
    --------
    >>> cache = Cache("/tmp/stage", max_bytes="10 GiB")  # doctest: +SKIP
    >>> path = cache.get("s3://bucket/data/part-0.parquet")  # doctest: +SKIP
    """

    def __init__(
        self,
        root: str | os.PathLike,
        max_bytes: int | str | None = None,
        streams: int = 8,
        index_url: str | None = None,
        *,
        part_size: int | str = 16 << 20,
        transfers: int = 64,
        revalidate: str | float | None = "never",
        low_watermark: float = 0.8,
        lease: float = 60.0,
        retries: int = 5,
        **storage_options: Any,
    ):
        self.root = _make_root(root)
        self.max_bytes = parse_bytes(max_bytes) if isinstance(max_bytes, str) else max_bytes
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes!r}")
        if streams < 1 or transfers < 1:
            raise ValueError("streams and transfers must be at least 1")
        if not 0 < low_watermark <= 1:
            raise ValueError(f"low_watermark must be in (0, 1], got {low_watermark!r}")
        self.revalidate = parse_revalidate(revalidate)
        self.low_watermark = low_watermark
        self.transfers = transfers
        self._retries = _Tally()  # not a method of self: no reference cycle through config
        self.config = TransferConfig(
            part_size=parse_bytes(part_size) if isinstance(part_size, str) else part_size,
            streams=streams,
            retries=retries,
            on_retry=self._retries.add,
        )
        self.storage_options = storage_options
        self.index = CacheIndex.for_root(self.root, index_url, lease=lease)
        conflict = self.index.join(self.max_bytes)
        if conflict is not None:
            self.index.close()
            raise StagingError(
                f"the cache at {self.root} is in use with max_bytes={format_bytes(conflict)}, "
                f"not {format_bytes(self.max_bytes)}; give every process on a node the same limit"
            )
        self._args = (root, max_bytes, streams, index_url)
        self._kwargs = dict(
            part_size=part_size,
            transfers=transfers,
            revalidate=revalidate,
            low_watermark=low_watermark,
            lease=lease,
            retries=retries,
            **storage_options,
        )
        self._engines: dict[str, Any] = {}
        self._object_pool: ThreadPoolExecutor | None = None
        self._part_pool: ThreadPoolExecutor | None = None
        self._pool_pid = os.getpid()
        self._engines_pid = os.getpid()
        self._lock = threading.Lock()
        self._touches: dict[str, tuple[float, int]] = {}
        self._last_flush = time.monotonic()
        self._in_use: collections.Counter[str] = collections.Counter()
        self._counters = dict.fromkeys(
            ("hits", "misses", "bytes_staged", "bytes_served", "evictions", "bytes_evicted"), 0
        )
        self._finalizer = weakref.finalize(self, _flush_and_close, self.index, self._touches)
        self._sweep_temp()

    # -- public API ---------------------------------------------------------

    def get(self, url: str) -> str:
        """Local path of ``url``; downloads it first on a miss."""
        key = layout.normalize_url(url)
        path = self._hit(key)
        if path is not None:
            return path
        return self._stage_missing([key], NoOpCallback())[key]

    def stage(self, urls: Iterable[str], *, callback: Callback | None = None) -> dict[str, str]:
        """Stage many URLs in parallel; returns ``{url: local path}``.

        A URL ending in ``/`` is a prefix: every object under it is staged
        and appears in the result under its own URL.  ``callback`` is an
        :class:`fsspec.callbacks.Callback` told the total size as it becomes
        known and every byte that arrives.
        """
        keys = {url: layout.normalize_url(url) for url in self._expand(urls)}
        with self._staging(keys.values()):  # what this call returns, it does not evict
            found = self._hits(set(keys.values()))
            missing = [key for key, path in found.items() if path is None]
            if missing:
                found.update(self._stage_missing(missing, callback or NoOpCallback()))
        return {url: found[key] for url, key in keys.items()}

    @contextlib.contextmanager
    def _staging(self, keys: Iterable[str]) -> Iterator[None]:
        keys = list(keys)
        with self._lock:
            self._in_use.update(keys)
        try:
            yield
        finally:
            with self._lock:
                self._in_use.subtract(keys)
                self._in_use += collections.Counter()  # drop the zeros

    def _expand(self, urls: Iterable[str]) -> list[str]:
        """``urls`` with every prefix (``…/``) replaced by the objects under it."""
        out = []
        for url in urls:
            if not url.endswith("/"):
                out.append(url)
                continue
            import fsspec

            protocol = url.split("://", 1)[0]
            fs = fsspec.filesystem(protocol, **self.storage_options.get(protocol, {}))
            found = fs.find(url)
            if not found:
                raise RemoteNotFoundError(f"no objects under {url}")
            out += [f"{protocol}://{path}" for path in found]
        return out

    def stage_query(
        self,
        db_url: str,
        query: str,
        *,
        partition_on: str | None = None,
        partitions: int | None = None,
        params: tuple | dict | None = None,
        ttl: float | None = None,
        version_query: str | None = None,
        allow_empty: bool = False,
        compression: str = "none",
    ) -> str:
        """Stage the result of ``query`` as Parquet; returns the local path.

        The path is a Parquet file, or a directory of ``part-NNNN.parquet``
        files when ``partition_on`` (a numeric column) and ``partitions`` > 1
        are given: key ranges are then read over that many connections at once.
        The cache key is the database URL without its password, the query, its
        ``params`` and, with ``version_query`` (e.g. ``SELECT max(updated_at)
        FROM t``), that query's current value.  ``ttl`` re-runs a query whose
        cached result is older than this many seconds.  ``params`` go to the
        driver with its own placeholders (``$1`` for PostgreSQL, ``?`` or
        ``:name`` for SQLite).

        Examples
        --------
        >>> path = cache.stage_query("postgresql://u@db/x", "SELECT * FROM runs")  # doctest: +SKIP
        >>> df = pandas.read_parquet(path)  # doctest: +SKIP
        """
        from dask_staging import sql

        version = sql.scalar(db_url, version_query) if version_query else None
        partitioned = bool(partition_on) and (partitions or 0) > 1
        shape = [partition_on, partitions, compression] if partitioned else [compression]
        key = sql.query_key(db_url, query, params, version, shape)
        path = self._hit(key)
        if path is not None:
            entry = self.index.lookup(key)
            if ttl is None or time.time() - (entry.validated or 0) < ttl:
                return path

        def produce(key: str, rel: str, tmp: str, progress) -> tuple[dict, str]:
            final = self._path(rel)
            temp = self._path(tmp)
            try:
                sql.export_query(
                    db_url,
                    query,
                    temp,
                    partition_on=partition_on if partitioned else None,
                    partitions=partitions,
                    allow_empty=allow_empty,
                    compression=compression,
                    params=params,
                )
                size = checksum.tree_size(temp)
                digest = checksum.path_checksum(temp, self.config.part_size)
                _replace_tree(temp, final)
            except BaseException:
                remove_file(temp)
                self.index.release(key)
                raise
            record = {"url": key, "size": size, "version": _text(version), "checksum": digest}
            return record, final

        refresh = {key} if path is not None else set()
        return self._stage_missing([key], NoOpCallback(), produce=produce, refresh=refresh)[key]

    def contains(self, url: str) -> bool:
        """Whether a complete copy of ``url`` is cached (no download, no access recorded)."""
        entry = self.index.lookup(layout.normalize_url(url))
        return entry is not None and entry.state == READY and self._file(entry).exists()

    def open(self, url: str) -> BinaryIO:
        """Open the cached copy of ``url`` for reading; eviction skips it while open.

        On this host a shared ``flock`` marks the file as in use; with an index
        shared across hosts a reader row does the same for the other hosts.
        """
        key = layout.normalize_url(url)
        for _ in range(3):
            path = self.get(key)
            reader = self.index.add_reader(key) if self.index.shared else None
            try:
                f = _ReaderFile(path, self.index, reader)
            except FileNotFoundError:  # evicted between get() and open()
                if reader:
                    self.index.remove_reader(reader)
                continue
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            if os.path.exists(path):
                return f
            f.close()
        raise StagingError(f"{url} was evicted repeatedly while being opened; raise max_bytes")

    def entries(self) -> list[Entry]:
        """Cached entries, least recently used first."""
        self._flush_touches()
        return self.index.entries()

    def pin(self, url: str) -> None:
        """Keep ``url`` in the cache until :meth:`unpin`; stages it first if needed.

        Query results are pinned by the key :meth:`entries` shows (``sql+…``).
        """
        key = url if url.startswith("sql+") else layout.normalize_url(url)
        if not key.startswith("sql+"):
            self.get(key)
        if not self.index.set_pinned(key, True):
            raise StagingError(f"{url} was evicted before it could be pinned")

    def unpin(self, url: str) -> None:
        """Let ``url`` be evicted again."""
        key = url if url.startswith("sql+") else layout.normalize_url(url)
        if not self.index.set_pinned(key, False):
            raise StagingError(f"{url} is not in the cache at {self.root}")

    def evict(self, url: str | None = None, *, to_bytes: int | str | None = None) -> int:
        """Remove ``url``, or least recently used entries down to ``to_bytes``, or
        everything evictable; returns the bytes freed.  Pinned and open entries stay."""
        self._flush_touches()
        if url is not None:
            key = url if url.startswith("sql+") else layout.normalize_url(url)
            entry = self.index.lookup(key)
            if entry is None or entry.state != READY:
                return 0
            if entry.pinned:
                raise EntryInUseError(f"{url} is pinned; unpin it before evicting it")
            if not self._remove([entry]):
                raise EntryInUseError(f"{url} is open by another reader and was not evicted")
            return entry.size
        target = 0 if to_bytes is None else _as_bytes(to_bytes)
        return self._evict_to(target)

    def verify(self, *, remove: bool = False, orphan_age: float = 60.0) -> list[str]:
        """URLs whose local copy fails its size or checksum check.

        An entry whose file is gone (an eviction interrupted by a crash, or a
        file deleted by hand) is dropped, as the next access would do, and not
        reported.  With ``remove=True`` the failing entries are also dropped,
        to be staged again, and files that no entry accounts for (left by a
        process killed between renaming a download into place and recording
        it) are deleted once they are ``orphan_age`` seconds old.
        """
        bad = []
        entries = self.index.entries()
        for entry in entries:
            path = self._file(entry)
            try:
                ok = checksum.tree_size(str(path)) == entry.size
                if ok and entry.checksum:
                    part = checksum.part_size_of(entry.checksum)
                    ok = checksum.path_checksum(str(path), part) == entry.checksum
            except FileNotFoundError:
                logger.info("dropping %s: its file is gone", entry.url)
                self.index.forget(entry.url)
                continue
            if not ok:
                bad.append(entry.url)
                if remove:
                    self.index.forget(entry.url)
                    remove_file(path)
        if remove:
            known = {entry.path for entry in entries if entry.url not in bad}
            for path in self._orphans(known, orphan_age):
                logger.warning("removing %s: no cache entry accounts for it", path)
                remove_file(path)
        return bad

    def _orphans(self, known: set[str], older_than: float) -> list[Path]:
        cutoff = time.time() - older_than
        out = []
        for path in (self.root / layout.DATA).glob("*/*"):
            relative = path.relative_to(self.root).as_posix()
            if relative not in known and path.lstat().st_mtime <= cutoff:
                out.append(path)
        return out

    def stats(self) -> dict[str, Any]:
        """This process's counters and the index's totals."""
        self._flush_touches()
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
        out["retries"] = self._retries.value
        out.update(self.index.totals())
        out["max_bytes"] = self.max_bytes
        out["root"] = str(self.root)
        return out

    def close(self) -> None:
        """Write pending access times, stop the transfer threads, release the index."""
        for pool in (self._object_pool, self._part_pool):
            if pool is not None:
                pool.shutdown(wait=True)
        self._finalizer()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce__(self):
        return _rebuild, (self._args, self._kwargs)

    def __repr__(self) -> str:
        limit = format_bytes(self.max_bytes) if self.max_bytes else "unbounded"
        return f"<Cache root={str(self.root)!r} {limit}>"

    # -- hits -------------------------------------------------------------

    def _hits(self, keys: set[str]) -> dict[str, str | None]:
        entries = self.index.lookup_many(keys)
        return {key: self._check_hit(key, entries.get(key)) for key in keys}

    def _hit(self, key: str) -> str | None:
        return self._check_hit(key, self.index.lookup(key))

    def _check_hit(self, key: str, entry: Entry | None) -> str | None:
        """Path of a usable ready ``entry`` (recording the access), else None."""
        if entry is None or entry.state != READY:
            return None
        path = self._file(entry)
        if not path.exists():
            self.index.forget(key)
            return None
        if self.revalidate is not None and time.time() - (entry.validated or 0) >= self.revalidate:
            return None
        self._touch(key, entry.size)
        return str(path)

    def _touch(self, key: str, size: int = 0) -> None:
        now = time.time()
        with self._lock:
            _, count = self._touches.get(key, (0.0, 0))
            self._touches[key] = (now, count + 1)
            self._counters["hits"] += 1
            self._counters["bytes_served"] += size
            due = time.monotonic() - self._last_flush > TOUCH_INTERVAL
        if due:
            self._flush_touches()

    def _flush_touches(self) -> None:
        with self._lock:
            touches = dict(self._touches)
            self._touches.clear()
            self._last_flush = time.monotonic()
        self.index.touch_many(touches)

    # -- misses -------------------------------------------------------------

    def _pools(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        """Threads for whole objects and for parts of large ones, made on first use."""
        with self._lock:
            if self._object_pool is None or self._pool_pid != os.getpid():  # new, or forked
                self._object_pool = ThreadPoolExecutor(self.transfers, "staging-object")
                self._part_pool = ThreadPoolExecutor(self.config.streams, "staging-part")
                self._pool_pid = os.getpid()
            return self._object_pool, self._part_pool

    def _stage_missing(
        self,
        keys: list[str],
        callback: Callback,
        *,
        produce: Callable | None = None,
        refresh: set[str] | None = None,
    ) -> dict[str, str]:
        """Make what is missing, wait for what others make; ``{key: path}``.

        ``produce(key, rel, tmp, progress) -> (record, path)`` makes one entry
        (default: download the URL); ``refresh`` forces keys to be made again
        (default: the ones whose remote copy changed).
        """
        results: dict[str, str] = {}
        progress = _Progress(callback)
        objects, _ = self._pools()
        produce = produce or self._download
        if refresh is None:
            refresh = self._stale(keys, results)
        waiting = [k for k in keys if k not in results]
        delay = 0.01
        with self._heartbeat():
            while waiting:
                items = [(k, layout.relative_path(k), layout.temp_path(k)) for k in waiting]
                claims = self._claim(items, refresh)
                ours, waiting = [], []
                for key, rel, tmp in items:
                    claim = claims[key]
                    if claim.status == "ready":
                        results[key] = str(self._file(claim.entry))
                        self._touch(key, claim.entry.size)
                    elif claim.status == "claimed":
                        ours.append(objects.submit(produce, key, rel, tmp, progress))
                    else:
                        waiting.append(key)
                refresh = set()
                results.update(self._collect(ours))
                if waiting:
                    time.sleep(delay)
                    delay = min(delay * 1.5, 0.25)
        return results

    def _collect(self, futures) -> dict[str, str]:
        """Wait for downloads and publish them in batches (one transaction per batch).

        Every download finishes, and every finished one is published, before
        the first error (if any) is raised.
        """
        paths: dict[str, str] = {}
        batch: list[dict] = []
        errors: list[BaseException] = []
        flushed = time.monotonic()

        def publish() -> None:
            failpoints.reach("publish")
            lost = self.index.publish_many(batch)
            for key in lost:
                logger.warning("another host took over %s while it was downloading here", key)
            with self._lock:
                self._counters["misses"] += len(batch)
                self._counters["bytes_staged"] += sum(r["size"] for r in batch)
            batch.clear()

        for future in as_completed(futures):
            try:
                record, path = future.result()
            except Exception as exc:
                errors.append(exc)
                continue
            paths[record["url"]] = path
            batch.append(record)
            if len(batch) >= 500 or time.monotonic() - flushed > 0.05:
                publish()
                flushed = time.monotonic()
        if batch:
            publish()
        if errors:
            raise errors[0]
        return paths

    def _claim(self, items, refresh):
        claims = {}
        plain = [item for item in items if item[0] not in refresh]
        again = [item for item in items if item[0] in refresh]
        if plain:
            claims.update(self.index.claim_many(plain))
        if again:
            claims.update(self.index.claim_many(again, refresh=True))
        for claim in claims.values():
            if claim.abandoned_tmp:
                logger.info("removing %s left by a crashed download", claim.abandoned_tmp)
                remove_file(self.root / claim.abandoned_tmp)
        return claims

    def _stale(self, keys: list[str], results: dict[str, str]) -> set[str]:
        """Check cached-but-due entries against the remote; returns those that changed."""
        if self.revalidate is None:
            return set()
        now = time.time()
        due = [
            entry
            for entry in self.index.lookup_many(keys).values()
            if entry.state == READY and self._file(entry).exists()
        ]

        def changed(entry: Entry) -> bool:
            remote = self._engine(entry.url).head(entry.url)
            return remote.etag != entry.etag or remote.size != entry.size

        objects, _ = self._pools()
        stale = set()
        for entry, is_stale in zip(due, objects.map(changed, due), strict=True):
            if is_stale:
                stale.add(entry.url)
            else:
                self.index.mark_validated(entry.url, now)
                results[entry.url] = str(self._file(entry))
                self._touch(entry.url, entry.size)
        return stale

    def _download(self, key: str, rel: str, tmp: str, progress: _Progress) -> tuple[dict, str]:
        """Download one claimed URL into place; returns its index record and path."""
        final = self._path(rel)
        temp = self._path(tmp)
        engine = self._engine(key)
        _, parts = self._pools()

        def on_size(info: ObjectInfo) -> None:
            progress.add_total(info.size)
            if self.max_bytes is not None:
                self._make_room(key, info.size)

        def attempt(on_size=None) -> ObjectInfo:
            return download(engine, key, temp, final, self.config, parts=parts,
                            on_size=on_size, on_bytes=progress.update)  # fmt: skip

        try:
            try:
                info = attempt(on_size)
            except DiskFullError as exc:  # make room on the disk, then try once more
                if not self._free_disk(exc.needed):
                    raise self._disk_full_error(key, exc.needed) from None
                info = attempt()
        except BaseException:
            remove_file(temp)
            self.index.release(key)
            raise
        record = {
            "url": key,
            "size": info.size,
            "etag": info.etag,
            "version": info.version,
            "checksum": info.checksum,
        }
        return record, final

    @contextmanager
    def _heartbeat(self) -> Iterator[None]:
        """Renew this process's download leases while a staging call runs."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.index.lease / 3):
                self.index.heartbeat()

        thread = threading.Thread(target=beat, name="staging-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()

    def _engine(self, url: str):
        protocol = url.split("://", 1)[0]
        with self._lock:
            if self._engines_pid != os.getpid():  # forked: the parent's engines may not work
                self._engines.clear()
                self._engines_pid = os.getpid()
            engine = self._engines.get(protocol)
            if engine is None:
                engine = engine_for(protocol, self.storage_options.get(protocol, {}))
                self._engines[protocol] = engine
        return engine

    # -- space ----------------------------------------------------------------

    def _make_room(self, key: str, size: int) -> None:
        """Evict so that ``size`` more bytes fit under ``max_bytes``; reserve them."""
        if size > self.max_bytes:
            raise CacheFullError(
                f"{key} ({format_bytes(size)}) is larger than the cache limit "
                f"max_bytes={format_bytes(self.max_bytes)}"
            )
        totals = self.index.totals()
        used = totals["bytes_cached"] + totals["bytes_reserved"]
        # other processes read, and evict, the same entries at the same time: keep
        # trying for a while before calling a cache full of busy entries full
        deadline = time.monotonic() + EVICTION_PATIENCE
        while used + size > self.max_bytes:
            target = int(self.max_bytes * self.low_watermark) - size - totals["bytes_reserved"]
            freed, skipped = self._evict(max(target, 0))
            totals = self.index.totals()
            used = totals["bytes_cached"] + totals["bytes_reserved"]
            if used + size <= self.max_bytes:
                break
            if not skipped or time.monotonic() > deadline:  # nothing busy to wait for
                raise CacheFullError(
                    f"the cache at {self.root} is full: of {format_bytes(self.max_bytes)}, "
                    f"{format_bytes(totals['bytes_cached'])} is cached and in use (pinned "
                    f"{format_bytes(totals['bytes_pinned'])}, the rest open or just read) and "
                    f"{format_bytes(totals['bytes_reserved'])} is being staged, so {key} "
                    f"({format_bytes(size)}) does not fit"
                )
            if not freed:
                time.sleep(random.uniform(0.005, 0.05))
        self.index.reserve(key, size)

    def _free_disk(self, needed: int) -> int:
        """Evict least recently used entries until ``needed`` bytes are free on disk."""
        free = _disk_free(self.root)
        if free >= needed:
            return needed
        cached = self.index.totals()["bytes_cached"]
        self._evict_to(max(cached - (needed - free) - (needed >> 4), 0))
        return needed if _disk_free(self.root) >= needed else 0

    def _disk_full_error(self, key: str, needed: int) -> CacheFullError:
        return DiskFullError(
            f"no space left on the disk under {self.root} for {key}: needs "
            f"{format_bytes(needed)}, {format_bytes(_disk_free(self.root))} free after eviction"
        )

    def _evict_to(self, target: int) -> int:
        """Evict least recently used entries until the cached bytes are at most ``target``."""
        return self._evict(target)[0]

    def _evict(self, target: int) -> tuple[int, int]:
        """:meth:`_evict_to`, also returning how many candidates were passed over.

        Entries that turn out to be in use (open, just read, or being evicted by
        another process) are passed over for the next ones in LRU order.
        """
        cached = self.index.totals()["bytes_cached"]
        freed = skipped = 0
        after = None
        while cached > target:
            batch = self.index.lru(1000, after=after)
            if not batch:
                break
            after = (batch[-1].last_access, batch[-1].url)
            with self._lock:
                in_use = set(self._in_use)
            candidates = [e for e in batch if e.url not in in_use]
            while candidates and cached > target:
                chosen, total = [], 0
                while candidates and cached - total > target:
                    entry = candidates.pop(0)
                    chosen.append(entry)
                    total += entry.size
                gone = self._remove(chosen)
                skipped += len(chosen) - len(gone)
                removed = sum(e.size for e in gone)
                cached -= removed
                freed += removed
        return freed, skipped

    def _remove(self, entries: list[Entry]) -> list[Entry]:
        """Delete entries that are not pinned, open or accessed since they were read.

        Readers opened through :meth:`open` hold a shared ``flock`` on the file;
        an entry whose exclusive lock cannot be taken is in use and stays.
        Returns the entries removed.
        """
        held: list[int] = []
        free: list[Entry] = []
        if self.index.shared:
            busy = self.index.read_elsewhere([e.url for e in entries])
            entries = [e for e in entries if e.url not in busy]
        try:
            for entry in entries:
                try:
                    fd = os.open(self._file(entry), os.O_RDONLY)
                except FileNotFoundError:
                    free.append(entry)
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                held.append(fd)
                free.append(entry)
            by_url = {e.url: e for e in free}

            def unlink(urls: list[str]) -> None:
                for url in urls:
                    remove_file(self._file(by_url[url]))
                    failpoints.reach("evict")

            removed = self.index.remove_many(free, then=unlink)
        finally:
            for fd in held:
                os.close(fd)
        gone = [by_url[url] for url in removed]
        with self._lock:
            self._counters["evictions"] += len(gone)
            self._counters["bytes_evicted"] += sum(e.size for e in gone)
        return gone

    # -- files ----------------------------------------------------------------

    def _path(self, relative: str) -> str:
        return layout.inside(self.root, relative)

    def _file(self, entry: Entry) -> Path:
        return self.root / entry.path

    def _sweep_temp(self) -> None:
        """Delete temp files that crashed processes on this host left behind."""
        me = owner.hostname()
        for path in (self.root / layout.TMP).glob("*.part"):
            parsed = layout.parse_temp_name(path.name)
            if parsed and parsed[0] == me and owner.process_start(parsed[1]) is None:
                remove_file(path)


class _Tally:
    """A thread-safe counter."""

    def __init__(self):
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


class _ReaderFile(io.BufferedReader):
    """A cached file opened for reading; closing it drops its reader row."""

    def __init__(self, path: str, index: CacheIndex, reader: str | None):
        super().__init__(io.FileIO(path, "rb"))
        self._index, self._reader = index, reader

    def close(self) -> None:
        if not self.closed and self._reader is not None:
            reader, self._reader = self._reader, None
            self._index.remove_reader(reader)
        super().close()


class _Progress:
    """Adapts byte counts from many transfer threads to one fsspec callback."""

    def __init__(self, callback: Callback):
        self.callback = callback
        self.total = 0
        self.lock = threading.Lock()

    def add_total(self, size: int) -> None:
        with self.lock:
            self.total += size
            self.callback.set_size(self.total)

    def update(self, n: int) -> None:
        with self.lock:
            self.callback.relative_update(n)


def _make_root(root: str | os.PathLike) -> Path:
    path = Path(os.path.expandvars(os.path.expanduser(os.fspath(root))))
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        for sub in (layout.DATA, layout.TMP):
            (path / sub).mkdir(mode=0o700, exist_ok=True)
        if len(os.listdir(path / layout.DATA)) < len(layout.FANOUT):
            for sub in layout.FANOUT:
                (path / sub).mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StagingError(f"cannot create the cache root {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StagingError(f"the cache root {path} is not writable")
    owner_uid = path.stat().st_uid
    if owner_uid != os.geteuid():
        raise StagingError(
            f"the cache root {path} belongs to uid {owner_uid}, not to this user "
            f"(uid {os.geteuid()}); use a root of your own"
        )
    return path.resolve()


def _rebuild(args, kwargs) -> Cache:
    return Cache(*args, **kwargs)


def _flush_and_close(index: CacheIndex, touches: dict) -> None:
    try:
        index.touch_many(dict(touches))
        touches.clear()
        with contextlib.suppress(Exception):  # the database may be gone at exit
            index.leave()
    finally:
        index.close()


def _replace_tree(temp: str, final: str) -> None:
    """Publish ``temp`` (a file or directory) as ``final``, replacing an older copy."""
    if os.path.isdir(temp) and os.path.exists(final):
        old = f"{final}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(temp, final)
        remove_file(old)
    else:
        os.replace(temp, final)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _as_bytes(value: int | str) -> int:
    return parse_bytes(value) if isinstance(value, str) else int(value)


def _disk_free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
