"""Any other SQLAlchemy database (SQLite is the embedded default).

Reads stream rows with a server-side cursor in chunks; writes insert all rows
in one transaction, so a failure leaves the table as it was.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from dask_staging.sql import QueryError, check_parquet_schema, engine_url, redact

CHUNK_ROWS = 65_536

_SA_TYPES = [
    (pa.types.is_boolean, sa.Boolean),
    (pa.types.is_integer, sa.BigInteger),
    (pa.types.is_floating, sa.Float),
    (pa.types.is_timestamp, sa.DateTime),
    (pa.types.is_date, sa.Date),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), sa.LargeBinary),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), sa.Text),
]


def _error(exc: BaseException, db_url: str, doing: str) -> QueryError:
    orig = getattr(exc, "orig", None) or exc
    reason = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return QueryError(redact(f"{doing} failed: {reason}", db_url))


def export_query(
    db_url: str,
    query: str,
    dest: str,
    *,
    partition_on: str | None = None,
    partitions: int | None = None,
    compression: str = "none",
    allow_empty: bool = False,
    params: tuple | dict | None = None,
) -> int:
    """Write the result of ``query`` to the Parquet file ``dest``; returns the rows."""
    engine = sa.create_engine(engine_url(db_url))
    rows = 0
    try:
        with engine.connect() as conn:
            result = conn.execution_options(stream_results=True).exec_driver_sql(
                query, params if params is not None else ()
            )
            names = list(result.keys())
            writer = None
            try:
                while chunk := result.fetchmany(CHUNK_ROWS):
                    table = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in chunk])
                    if writer is None:
                        check_parquet_schema(table.schema)
                        writer = pq.ParquetWriter(dest, table.schema, compression=compression)
                    writer.write_table(table.cast(writer.schema))
                    rows += table.num_rows
                if writer is None and allow_empty:
                    empty = pa.table({n: pa.array([], pa.null()) for n in names})
                    pq.write_table(empty, dest)
            finally:
                if writer is not None:
                    writer.close()
    except sa.exc.SQLAlchemyError as exc:
        raise _error(exc, db_url, "the query") from None
    finally:
        engine.dispose()
    if rows == 0 and not allow_empty:
        raise QueryError(
            "the query returned no rows; pass allow_empty=True to cache an empty result"
        )
    return rows


def write_table(
    reader: pa.RecordBatchReader, db_url: str, table: str, *, mode: str, writers: int
) -> int:
    """Insert ``reader`` into ``table`` in one transaction; returns the rows."""
    engine = sa.create_engine(engine_url(db_url))
    schema_name, _, name = table.rpartition(".")
    try:
        exists = sa.inspect(engine).has_table(name, schema=schema_name or None)
        if mode == "append" and not exists:
            raise QueryError(f"table {table!r} does not exist; use mode='create' to create it")
        target = sa.Table(
            name,
            sa.MetaData(schema=schema_name or None),
            *(sa.Column(f.name, _sa_type(f)) for f in reader.schema),
        )
        rows = 0
        with engine.begin() as conn:
            if not exists:
                target.create(conn)
            elif mode == "replace":
                conn.execute(target.delete())
            for batch in reader:
                if batch.num_rows:
                    conn.execute(target.insert(), batch.to_pylist())
                    rows += batch.num_rows
        return rows
    except sa.exc.SQLAlchemyError as exc:
        raise _error(exc, db_url, f"writing {table}") from None
    finally:
        engine.dispose()


def _sa_type(field: pa.Field):
    for test, sa_type in _SA_TYPES:
        if test(field.type):
            return sa_type
    raise QueryError(f"column {field.name!r} has type {field.type}, which has no SQL mapping here")
