"""Stage remote objects and query results onto fast local storage, once per node."""

from dask_staging import config  # noqa: F401 - registers the "staging" config defaults
from dask_staging.cache import Cache
from dask_staging.errors import (
    CacheFullError,
    DiskFullError,
    EntryInUseError,
    RemoteAccessError,
    RemoteChangedError,
    RemoteNotFoundError,
    StagingError,
    TransferError,
)
from dask_staging.upload import stage_out


def __getattr__(name: str):
    # The Dask pieces import distributed; load them only when asked for.
    if name in ("StagingPlugin", "prefetch", "locations", "submit_near", "worker_stats"):
        from dask_staging import plugin

        return getattr(plugin, name)
    raise AttributeError(f"module 'dask_staging' has no attribute {name!r}")


def write_table(source, db_url, table, *, mode="append", writers=4, batch_rows=None) -> int:
    """Load a Parquet/CSV path, Arrow table or DataFrame into a database table.

    See :func:`dask_staging.sql.write_table`; imported lazily so that the
    cache works without pyarrow and database drivers installed.
    """
    from dask_staging.sql import write_table as _write_table

    return _write_table(source, db_url, table, mode=mode, writers=writers, batch_rows=batch_rows)


__all__ = [
    "Cache",
    "CacheFullError",
    "DiskFullError",
    "EntryInUseError",
    "RemoteAccessError",
    "RemoteChangedError",
    "RemoteNotFoundError",
    "StagingError",
    "StagingPlugin",
    "TransferError",
    "locations",
    "prefetch",
    "stage_out",
    "submit_near",
    "worker_stats",
    "write_table",
]
