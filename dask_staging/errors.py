"""Errors raised by dask_staging.  Each message is one sentence naming what went wrong."""

from __future__ import annotations


class StagingError(Exception):
    """Base class of the errors dask_staging raises on purpose."""


class RemoteNotFoundError(StagingError, FileNotFoundError):
    """The remote object or its bucket does not exist."""


class RemoteAccessError(StagingError, PermissionError):
    """The remote store refused the credentials or the request."""


class RemoteChangedError(StagingError):
    """The remote object changed while it was being downloaded."""


class TransferError(StagingError, ConnectionError):
    """A transfer kept failing after all its retries."""


class CacheFullError(StagingError, OSError):
    """The cache cannot make room for an object (limit reached or disk full)."""


class DiskFullError(CacheFullError):
    """The file system under the cache root ran out of space.

    ``needed`` is the size of the object that did not fit, in bytes.
    """

    def __init__(self, message: str, needed: int = 0):
        super().__init__(message)
        self.needed = needed


class EntryInUseError(StagingError):
    """An entry cannot be evicted because it is pinned or open."""
