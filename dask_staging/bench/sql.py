"""PostgreSQL rates: COPY TO, SELECT and stage_query out; COPY FROM and write_table in."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

from dask_staging.bench.budget import Budget
from dask_staging.sql import QueryError, db_identity, is_postgres, redact


class _Counter(io.RawIOBase):
    """A sink that only counts what COPY writes to it."""

    def __init__(self):
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.count += len(data)
        return len(data)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(db_url: str):
    """A psycopg2 connection, or a one-sentence error without the password."""
    import psycopg2

    from dask_staging.sql.postgres import libpq_url

    if not is_postgres(db_url):
        raise ValueError(f"--db must be a PostgreSQL URL, not {db_identity(db_url)}")
    try:
        return psycopg2.connect(libpq_url(db_url))
    except psycopg2.Error as exc:
        message = f"connecting to {db_identity(db_url)} failed: {_first_line(exc)}"
        raise QueryError(redact(message, db_url)) from None


def measure_db(db_url: str, budget: Budget, *, rows: int, work: Path) -> None:
    """Create a table of ``rows`` rows (id, float, 32-char text), measure, drop it."""
    import psycopg2

    from dask_staging.cache import Cache
    from dask_staging.sql import write_table

    table = f"dask_staging_bench_{uuid.uuid4().hex[:12]}"
    copy = f"{table}_in"
    target = db_identity(db_url)
    conn = connect(db_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE UNLOGGED TABLE {table} AS SELECT g::bigint AS id, random() AS x, "
                f"md5(g::text) AS s FROM generate_series(1, %s) g",
                (rows,),
            )
            cur.execute(f"CREATE UNLOGGED TABLE {copy} (LIKE {table})")
        payload = io.BytesIO()
        with conn.cursor() as cur:
            cur.copy_expert(f"COPY {table} TO STDOUT (FORMAT binary)", payload)
        size = payload.tell()
        common = {"tier": "db", "target": target, "bytes": size, "rows": rows}

        def copy_out():
            with conn.cursor() as cur:
                cur.copy_expert(f"COPY {table} TO STDOUT (FORMAT binary)", _Counter())

        def select():
            conn.autocommit = False  # a server-side cursor lives in a transaction
            try:
                with conn.cursor(name=f"bench_{uuid.uuid4().hex[:8]}") as cur:
                    cur.itersize = 50_000
                    cur.execute(f"SELECT * FROM {table}")
                    for _ in cur:
                        pass
            finally:
                conn.rollback()
                conn.autocommit = True

        cache = Cache(work / "cache-db")
        staged: list[str] = []

        def stage_query():
            cache.evict()
            staged[:] = [cache.stage_query(db_url, f"SELECT * FROM {table}")]

        def copy_in():
            with conn.cursor() as cur:
                cur.execute(f"TRUNCATE {copy}")
                payload.seek(0)
                cur.copy_expert(f"COPY {copy} FROM STDIN (FORMAT binary)", payload)

        try:
            budget.measure("DB COPY TO", copy_out, op="read", method="COPY TO binary", **common)
            budget.measure(
                "DB SELECT", select, op="read", method="SELECT (server-side cursor)", **common
            )
            budget.measure(
                "DB stage_query", stage_query, op="read", method="stage_query → Parquet", **common
            )
            budget.measure("DB COPY FROM", copy_in, op="write", method="COPY FROM binary", **common)
            if staged:
                budget.measure(
                    "DB write_table",
                    lambda: write_table(staged[0], db_url, copy, mode="replace"),
                    op="write",
                    method="write_table from Parquet",
                    **common,
                )
        finally:
            cache.close()
    except psycopg2.Error as exc:
        raise QueryError(redact(f"measuring {target} failed: {_first_line(exc)}", db_url)) from None
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}, {copy}")
        conn.close()
