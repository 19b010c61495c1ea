"""Transfer engines, one small module per kind of remote store.

An engine turns URLs of one protocol into :class:`~dask_staging.transfer.ObjectInfo`,
ranged byte streams and uploads.  ``s3`` uses obstore (Rust, measured about twice
as fast as s3fs on one large object); every other protocol goes through fsspec.
"""

from __future__ import annotations

from typing import Any


def engine_for(protocol: str, options: dict[str, Any]):
    """The engine for URLs of ``protocol``, configured with fsspec-style ``options``."""
    if protocol in ("s3", "s3a"):
        from dask_staging.engines.s3 import S3Engine

        return S3Engine(options)
    from dask_staging.engines.generic import FsspecEngine

    return FsspecEngine(protocol, options)
