"""Stage remote objects and query results onto fast local storage, once per node."""

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

__all__ = [
    "Cache",
    "CacheFullError",
    "DiskFullError",
    "EntryInUseError",
    "RemoteAccessError",
    "RemoteChangedError",
    "RemoteNotFoundError",
    "StagingError",
    "TransferError",
    "stage_out",
]
