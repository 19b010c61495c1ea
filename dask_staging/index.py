"""The cache index: the only code that speaks SQL about the cache.

One row per cached URL.  A row is either ``staging`` (one process holds a claim
to download it) or ``ready`` (the file at ``path`` is complete and verified).
Claims carry an owner (host, pid, process start time) and a lease, so a crashed
downloader never blocks the others: on its own host it is seen dead at once, on
another host when its lease runs out.
"""

from __future__ import annotations

import os
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

from dask_staging import owner as owners

metadata = sa.MetaData()

entries_table = sa.Table(
    "staging_entries",
    metadata,
    sa.Column("url", sa.Text, primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False, default=0),
    sa.Column("etag", sa.Text),
    sa.Column("version", sa.Text),
    sa.Column("checksum", sa.Text),
    sa.Column("state", sa.String(8), nullable=False),
    sa.Column("owner", sa.Text),
    sa.Column("lease_until", sa.Float),
    sa.Column("tmp_path", sa.Text),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("last_access", sa.Float, nullable=False),
    sa.Column("validated", sa.Float),
    sa.Column("pinned", sa.Boolean, nullable=False, default=False),
    sa.Column("hits", sa.BigInteger, nullable=False, default=0),
    sa.Index("staging_entries_lru", "state", "pinned", "last_access"),
)

readers_table = sa.Table(
    "staging_readers",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("url", sa.Text, nullable=False, index=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("lease_until", sa.Float, nullable=False),
)

users_table = sa.Table(
    "staging_users",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("max_bytes", sa.BigInteger),
    sa.Column("lease_until", sa.Float, nullable=False),
)

READER_LEASE = 24 * 3600.0  # readers on other hosts that crash hold an entry this long

READY = "ready"
STAGING = "staging"


@dataclass(frozen=True)
class Entry:
    """One cached object as recorded in the index."""

    url: str
    path: str
    size: int
    etag: str | None
    version: str | None
    checksum: str | None
    state: str
    owner: str | None
    lease_until: float | None
    tmp_path: str | None
    created: float
    last_access: float
    validated: float | None
    pinned: bool
    hits: int


@dataclass(frozen=True)
class Claim:
    """Outcome of :meth:`CacheIndex.claim` for one URL.

    ``status`` is ``"ready"`` (``entry`` is usable), ``"claimed"`` (the caller
    must download; ``abandoned_tmp`` is a dead owner's temp file to delete) or
    ``"busy"`` (a live owner is downloading; wait and ask again).
    """

    status: str
    entry: Entry | None = None
    abandoned_tmp: str | None = None


def _sqlite_url(root: Path) -> str:
    return f"sqlite:///{root / 'index.sqlite'}"


class CacheIndex:
    """SQL index of a cache directory.

    Parameters
    ----------
    url : str
        SQLAlchemy URL.  SQLite files are opened in WAL mode; write
        transactions take the write lock up front (``BEGIN IMMEDIATE``) so
        concurrent processes queue instead of failing on lock upgrades.
    lease : float
        Seconds a download claim stays valid without a heartbeat.
    """

    def __init__(self, url: str, *, lease: float = 60.0):
        self.url = url
        self.lease = lease
        self._owner = (os.getpid(), owners.current_owner())
        self.engine = _create_engine(url)
        self._create_schema()

    @property
    def owner(self) -> str:
        """This process's owner id (recomputed in a forked child)."""
        pid, owner = self._owner
        if pid != os.getpid():
            self._owner = pid, owner = os.getpid(), owners.current_owner()
        return owner

    @classmethod
    def for_root(cls, root: Path, url: str | None = None, **kwargs) -> CacheIndex:
        if url is None:  # created 0600 here; SQLite gives its -wal and -shm files the same mode
            fd = os.open(root / "index.sqlite", os.O_RDWR | os.O_CREAT, 0o600)
            os.fchmod(fd, 0o600)
            os.close(fd)
        return cls(url or _sqlite_url(root), **kwargs)

    def close(self) -> None:
        self.engine.dispose()

    def _create_schema(self) -> None:
        """Create the tables once, even when many processes open a new index at once."""
        for attempt in range(5):
            try:
                with self._write() as conn:
                    metadata.create_all(conn)
                return
            except sa.exc.DBAPIError:  # another process created them between check and create
                if attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))

    # -- transactions -----------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        connection = self.engine.connect().execution_options(sqlite_begin="IMMEDIATE")
        with connection as conn, conn.begin():
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    # -- reads --------------------------------------------------------------

    def lookup(self, url: str) -> Entry | None:
        with self._read() as conn:
            row = conn.execute(_select_url, {"url": url}).first()
        return Entry(*row) if row else None

    def lookup_many(self, urls: Iterable[str]) -> dict[str, Entry]:
        urls = list(urls)
        out = {}
        with self._read() as conn:
            for i in range(0, len(urls), 500):
                query = sa.select(entries_table).where(entries_table.c.url.in_(urls[i : i + 500]))
                out.update((row.url, Entry(*row)) for row in conn.execute(query))
        return out

    def entries(self, state: str | None = READY) -> list[Entry]:
        query = sa.select(entries_table).order_by(entries_table.c.last_access)
        if state is not None:
            query = query.where(entries_table.c.state == state)
        with self._read() as conn:
            return [Entry(*row) for row in conn.execute(query)]

    def totals(self) -> dict[str, int]:
        c = entries_table.c
        query = sa.select(
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(c.size), 0),
            sa.func.coalesce(sa.func.sum(sa.case((c.pinned, c.size), else_=0)), 0),
            sa.func.coalesce(sa.func.sum(c.hits), 0),
        ).where(c.state == READY)
        with self._read() as conn:
            count, size, pinned, hits = conn.execute(query).one()
        reserved = self.reserved_bytes()
        return {
            "entries": int(count),
            "bytes_cached": int(size),
            "bytes_pinned": int(pinned),
            "bytes_reserved": reserved,
            "hits_total": int(hits),
        }

    def reserved_bytes(self) -> int:
        """Bytes claimed by downloads in progress (their expected sizes)."""
        c = entries_table.c
        query = sa.select(sa.func.coalesce(sa.func.sum(c.size), 0)).where(c.state == STAGING)
        with self._read() as conn:
            return int(conn.execute(query).scalar_one())

    def lru(self, limit: int, *, after: tuple[float, str] | None = None) -> list[Entry]:
        """Least recently used evictable entries (ready, not pinned), oldest first.

        ``after`` is the ``(last_access, url)`` of the last entry of the previous page.
        """
        c = entries_table.c
        query = sa.select(entries_table).where(c.state == READY, c.pinned == sa.false())
        if after is not None:
            query = query.where(sa.tuple_(c.last_access, c.url) > sa.tuple_(*after))
        query = query.order_by(c.last_access, c.url).limit(limit)
        with self._read() as conn:
            return [Entry(*row) for row in conn.execute(query)]

    # -- claims -------------------------------------------------------------

    def claim(self, url: str, path: str, tmp_path: str, *, refresh: bool = False) -> Claim:
        """Claim the right to download ``url``, or learn that it is ready or busy."""
        return self.claim_many([(url, path, tmp_path)], refresh=refresh)[url]

    def claim_many(
        self, items: Iterable[tuple[str, str, str]], *, refresh: bool = False
    ) -> dict[str, Claim]:
        """Claim many URLs in one transaction; see :meth:`claim`.

        Existing rows are read in batches; new rows go in with one
        ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, so a row another
        process inserted first comes back as busy, never as an error.
        """
        now = time.time()
        items = list(items)
        c = entries_table.c
        out: dict[str, Claim] = {}
        with self._write() as conn:
            existing: dict[str, Entry] = {}
            for i in range(0, len(items), 500):
                urls = [url for url, _, _ in items[i : i + 500]]
                query = sa.select(entries_table).where(c.url.in_(urls)).with_for_update()
                existing.update((row.url, Entry(*row)) for row in conn.execute(query))
            new = [
                {
                    "url": url,
                    "path": path,
                    "size": 0,
                    "state": STAGING,
                    "owner": self.owner,
                    "lease_until": now + self.lease,
                    "tmp_path": tmp_path,
                    "created": now,
                    "last_access": now,
                    "pinned": False,
                    "hits": 0,
                }
                for url, path, tmp_path in items
                if url not in existing
            ]
            if new:
                insert = _insert_for(self.engine.dialect.name)(entries_table)
                stmt = insert.on_conflict_do_nothing(index_elements=["url"]).returning(c.url)
                inserted = set(conn.execute(stmt, new).scalars())
                for row in new:
                    out[row["url"]] = Claim("claimed" if row["url"] in inserted else "busy")
            for url, path, tmp_path in items:
                entry = existing.get(url)
                if entry is None:
                    continue
                if entry.state == READY and not refresh:
                    out[url] = Claim("ready", entry)
                    continue
                if entry.state == STAGING and owners.alive(entry.owner, entry.lease_until, now):
                    out[url] = Claim("busy", entry)
                    continue
                conn.execute(
                    entries_table.update()
                    .where(c.url == url)
                    .values(
                        state=STAGING,
                        owner=self.owner,
                        lease_until=now + self.lease,
                        tmp_path=tmp_path,
                        path=path,
                    )
                )
                abandoned = entry.tmp_path if entry.state == STAGING else None
                out[url] = Claim("claimed", entry, abandoned_tmp=abandoned)
        return out

    def reserve(self, url: str, size: int) -> None:
        """Record the expected size of a claimed download (counts against the budget)."""
        with self._write() as conn:
            conn.execute(
                entries_table.update()
                .where(entries_table.c.url == url, entries_table.c.owner == self.owner)
                .values(size=size)
            )

    def heartbeat(self) -> int:
        """Extend the lease of every claim this process holds."""
        with self._write() as conn:
            result = conn.execute(
                entries_table.update()
                .where(entries_table.c.owner == self.owner, entries_table.c.state == STAGING)
                .values(lease_until=time.time() + self.lease)
            )
            return result.rowcount

    def publish_many(self, records: list[dict]) -> list[str]:
        """Mark claimed downloads ready; returns the URLs this process no longer owned."""
        now = time.time()
        c = entries_table.c
        stmt = (
            entries_table.update()
            .where(c.url == sa.bindparam("u"), c.owner == self.owner, c.state == STAGING)
            .values(
                state=READY,
                size=sa.bindparam("size"),
                etag=sa.bindparam("etag"),
                version=sa.bindparam("version"),
                checksum=sa.bindparam("checksum"),
                owner=None,
                lease_until=None,
                tmp_path=None,
                last_access=now,
                validated=now,
            )
        )
        params = [
            {
                "u": r["url"],
                "size": r["size"],
                "etag": r.get("etag"),
                "version": r.get("version"),
                "checksum": r.get("checksum"),
            }
            for r in records
        ]
        with self._write() as conn:
            updated = conn.execute(stmt, params).rowcount
            if updated == len(records):
                return []
            mine = sa.select(c.url).where(
                c.url.in_([r["url"] for r in records]), c.state == READY, c.validated == now
            )
            published = set(conn.execute(mine).scalars())
        return [r["url"] for r in records if r["url"] not in published]

    def release(self, url: str) -> None:
        """Give up a claim after a failed download: the row goes away."""
        with self._write() as conn:
            conn.execute(
                entries_table.delete().where(
                    entries_table.c.url == url,
                    entries_table.c.owner == self.owner,
                    entries_table.c.state == STAGING,
                )
            )

    # -- bookkeeping ----------------------------------------------------------

    def touch_many(self, hits: dict[str, tuple[float, int]]) -> None:
        """Record accesses: url -> (last access time, number of hits)."""
        if not hits:
            return
        c = entries_table.c
        stmt = (
            entries_table.update()
            .where(c.url == sa.bindparam("u"))
            .values(
                last_access=sa.func.max(c.last_access, sa.bindparam("t"))
                if self.engine.dialect.name == "sqlite"
                else sa.func.greatest(c.last_access, sa.bindparam("t")),
                hits=c.hits + sa.bindparam("n"),
            )
        )
        with self._write() as conn:
            conn.execute(stmt, [{"u": u, "t": t, "n": n} for u, (t, n) in hits.items()])

    def mark_validated(self, url: str, when: float) -> None:
        with self._write() as conn:
            conn.execute(
                entries_table.update().where(entries_table.c.url == url).values(validated=when)
            )

    def set_pinned(self, url: str, pinned: bool) -> bool:
        with self._write() as conn:
            result = conn.execute(
                entries_table.update()
                .where(entries_table.c.url == url, entries_table.c.state == READY)
                .values(pinned=pinned)
            )
            return result.rowcount == 1

    def remove_many(
        self, entries: list[Entry], *, then: Callable[[list[str]], None] | None = None
    ) -> list[str]:
        """Delete the rows of ``entries`` that are still ready, unpinned and not
        accessed since they were read; returns their URLs.

        ``then(urls)`` (deleting the files) runs inside the transaction, before
        the commit: a crash in between leaves rows without files, which the next
        access repairs, never files that no row accounts for.
        """
        if not entries:
            return []
        c = entries_table.c
        newest = max(e.last_access for e in entries)
        stmt = (
            entries_table.delete()
            .where(
                c.url.in_([e.url for e in entries]),
                c.state == READY,
                c.pinned == sa.false(),
                c.last_access <= newest,
            )
            .returning(c.url)
        )
        with self._write() as conn:
            removed = list(conn.execute(stmt).scalars())
            if then is not None and removed:
                then(removed)
        return removed

    @property
    def shared(self) -> bool:
        """Whether other hosts may use this index (anything but SQLite)."""
        return self.engine.dialect.name != "sqlite"

    def add_reader(self, url: str) -> str:
        """Record that this process has ``url`` open; returns the reader id."""
        reader = uuid.uuid4().hex
        with self._write() as conn:
            conn.execute(
                readers_table.insert(),
                {
                    "id": reader,
                    "url": url,
                    "owner": self.owner,
                    "lease_until": time.time() + READER_LEASE,
                },
            )
        return reader

    def remove_reader(self, reader: str) -> None:
        with self._write() as conn:
            conn.execute(readers_table.delete().where(readers_table.c.id == reader))

    def read_elsewhere(self, urls: list[str]) -> set[str]:
        """URLs that a live process other than this one has open."""
        if not urls:
            return set()
        c = readers_table.c
        query = sa.select(c.url, c.owner, c.lease_until).where(
            c.url.in_(urls), c.owner != self.owner
        )
        now = time.time()
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {url for url, owner, lease in rows if owners.alive(owner, lease, now)}

    def join(self, max_bytes: int | None) -> int | None:
        """Register this process as a user with ``max_bytes``; returns a live user's
        different limit (a conflict) or None."""
        now = time.time()
        c = users_table.c
        with self._write() as conn:
            others = conn.execute(sa.select(c.id, c.owner, c.max_bytes, c.lease_until)).all()
            for user, owner, limit, lease in others:
                if not owners.alive(owner, lease, now):
                    conn.execute(users_table.delete().where(c.id == user))
                elif max_bytes is not None and limit is not None and limit != max_bytes:
                    return limit
            self._user = uuid.uuid4().hex
            conn.execute(
                users_table.insert(),
                {
                    "id": self._user,
                    "owner": self.owner,
                    "max_bytes": max_bytes,
                    "lease_until": now + READER_LEASE,
                },
            )
        return None

    def leave(self) -> None:
        user = getattr(self, "_user", None)
        if user is not None:
            with self._write() as conn:
                conn.execute(users_table.delete().where(users_table.c.id == user))

    def forget(self, url: str) -> None:
        """Delete a ready row whatever its state of use (its file is gone)."""
        with self._write() as conn:
            conn.execute(
                entries_table.delete().where(
                    entries_table.c.url == url, entries_table.c.state == READY
                )
            )

    def bulk_insert_ready(self, rows: list[dict]) -> None:
        """Insert ready rows directly; used to build large indexes for benchmarks."""
        with self._write() as conn:
            conn.execute(entries_table.insert(), rows)


_select_url = sa.select(entries_table).where(entries_table.c.url == sa.bindparam("url"))


def _insert_for(dialect: str):
    """The dialect's INSERT construct (it knows ON CONFLICT)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def _create_engine(url: str) -> sa.Engine:
    engine = _new_engine(url)
    ref = weakref.ref(engine)

    def _after_fork() -> None:  # a child must not share the parent's connections
        child_engine = ref()
        if child_engine is not None:
            child_engine.dispose(close=False)

    os.register_at_fork(after_in_child=_after_fork)
    return engine


def _new_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn):
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine
    parsed = sa.engine.make_url(url)
    if parsed.drivername == "postgresql":  # SQLAlchemy 2.1 would pick psycopg 3
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return sa.create_engine(parsed, pool_pre_ping=True)
