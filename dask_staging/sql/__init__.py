"""Databases as sources and sinks: query results to Parquet, Arrow data to tables.

PostgreSQL goes through ADBC: binary COPY decoded straight into Arrow, which
keeps every column type and NULLs and, with the Parquet writer on its own
thread, beat ``COPY ... CSV`` parsed by pyarrow (1.05 s vs 1.30 s for 5 M rows).
Any other SQLAlchemy URL (SQLite is the embedded default) goes through
SQLAlchemy.  One small module per backend.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from dask_staging.errors import StagingError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")


class QueryError(StagingError):
    """A query or a database connection failed."""


def engine_url(db_url: str) -> str:
    """``db_url`` with psycopg2 as the PostgreSQL driver unless one is named.

    SQLAlchemy 2.1 defaults ``postgresql://`` to psycopg 3, which this project
    does not install.
    """
    url = sa.engine.make_url(db_url)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg2")
    return url.render_as_string(hide_password=False)


def is_postgres(db_url: str) -> bool:
    return sa.engine.make_url(db_url).get_backend_name() == "postgresql"


def db_identity(db_url: str) -> str:
    """The URL without its password: ``postgresql://user@host:5432/db``."""
    url = sa.engine.make_url(db_url)
    user = f"{url.username}@" if url.username else ""
    host = url.host or ""
    port = f":{url.port}" if url.port else ""
    query = "?" + "&".join(f"{k}={v}" for k, v in sorted(url.query.items())) if url.query else ""
    return f"{url.get_backend_name()}://{user}{host}{port}/{url.database or ''}{query}"


def normalize_query(query: str) -> str:
    """The query with surrounding whitespace and trailing semicolons removed."""
    text = query.strip().rstrip(";").strip()
    if not text:
        raise ValueError("the query is empty")
    return text


def query_key(
    db_url: str, query: str, params: Any = None, version: Any = None, shape: Any = None
) -> str:
    """Cache key of a query result: database identity, query, parameters, data
    version and ``shape`` (how the result is laid out, e.g. its partitioning)."""
    payload = json.dumps(
        [normalize_query(query), params, version, shape], sort_keys=True, default=str
    ).encode()
    digest = hashlib.sha256(payload).hexdigest()[:32]
    return f"sql+{db_identity(db_url)}#{digest}"


def redact(text: str, db_url: str) -> str:
    """``text`` without the URL's password anywhere in it."""
    password = sa.engine.make_url(db_url).password
    if password:
        text = text.replace(str(password), "***")
    return re.sub(r"(://[^:/@\s]+:)[^@\s]+@", r"\1***@", text)


def check_table_name(table: str) -> str:
    """``table`` if it is a plain (optionally schema-qualified) identifier."""
    if not _IDENTIFIER.match(table or ""):
        raise ValueError(
            f"table name {table!r} is not a plain SQL identifier "
            "(letters, digits and _, optionally schema.table)"
        )
    return table


def unsupported_columns(schema: pa.Schema) -> list[str]:
    """Columns whose Arrow type Parquet cannot store."""
    bad = []
    for field in schema:
        try:
            pq.write_table(pa.table({field.name: pa.array([], field.type)}), io.BytesIO())
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            bad.append(field.name)
    return bad


def check_parquet_schema(schema: pa.Schema) -> None:
    bad = unsupported_columns(schema)
    if bad:
        described = ", ".join(f"{name!r} ({_type_name(schema.field(name))})" for name in bad)
        raise QueryError(
            f"column(s) {described} cannot be stored in Parquet; cast them in the query, "
            f"e.g. {bad[0]}::text"
        )


def _type_name(field: pa.Field) -> str:
    meta = field.metadata or {}
    return meta.get(b"POSTGRESQL:type", str(field.type).encode()).decode()


def export_query(db_url: str, query: str, dest: str, **kwargs) -> int:
    """Write the result of ``query`` to ``dest`` (file, or directory when partitioned)."""
    if is_postgres(db_url):
        from dask_staging.sql import postgres as backend
    else:
        from dask_staging.sql import generic as backend
    return backend.export_query(db_url, normalize_query(query), dest, **kwargs)


def scalar(db_url: str, query: str) -> Any:
    """The single value ``query`` returns (used for version queries)."""
    engine = sa.create_engine(engine_url(db_url))
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(normalize_query(query)).scalar()
    except sa.exc.SQLAlchemyError as exc:
        raise QueryError(redact(f"version query failed: {_first_line(exc)}", db_url)) from None
    finally:
        engine.dispose()


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


MODES = ("append", "replace", "create")


def as_batch_reader(source, batch_rows: int | None = None) -> pa.RecordBatchReader:
    """Arrow batches from a Parquet/CSV path (file or dataset), Arrow table or DataFrame."""
    import pyarrow.dataset as ds

    if isinstance(source, pa.RecordBatchReader):
        return source
    if isinstance(source, pa.Table):
        return source.to_reader(max_chunksize=batch_rows)
    if type(source).__name__ == "DataFrame":
        return pa.Table.from_pandas(source, preserve_index=False).to_reader(batch_rows)
    path = os.fspath(source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist")
    fmt = "csv" if path.endswith((".csv", ".csv.gz")) else "parquet"
    dataset = ds.dataset(path, format=fmt)
    options = {"batch_size": batch_rows} if batch_rows else {}
    return dataset.scanner(**options).to_reader()


def write_table(
    source,
    db_url: str,
    table: str,
    *,
    mode: str = "append",
    writers: int = 4,
    batch_rows: int | None = None,
) -> int:
    """Load ``source`` into the database table ``table``, all or nothing.

    Parameters
    ----------
    source : path, pyarrow.Table, pandas.DataFrame or RecordBatchReader
        A Parquet file or dataset directory, a CSV file, or in-memory data.
    db_url : str
        SQLAlchemy URL of the target database.
    table : str
        ``name`` or ``schema.name``.
    mode : {"append", "replace", "create"}
        ``append`` to an existing table; ``replace`` its rows (creating it if
        missing); ``create`` it from the Arrow schema if missing, then append.
    writers : int
        Parallel connections (PostgreSQL: COPY into an UNLOGGED staging
        table, then one transaction into the target).
    batch_rows : int, optional
        Rows per batch read from ``source``.

    Returns
    -------
    int
        Rows written.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if writers < 1:
        raise ValueError("writers must be at least 1")
    check_table_name(table)
    reader = as_batch_reader(source, batch_rows)
    if is_postgres(db_url):
        from dask_staging.sql import postgres as backend
    else:
        from dask_staging.sql import generic as backend
    return backend.write_table(reader, db_url, table, mode=mode, writers=writers)
