"""Transfer engines, one small module per kind of remote store.

An engine turns URLs of one protocol into :class:`~dask_staging.transfer.ObjectInfo`,
ranged byte streams and uploads.  ``s3`` uses obstore (Rust, measured about twice
as fast as s3fs on one large object); every other protocol goes through fsspec.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("dask_staging")


def engine_for(protocol: str, options: dict[str, Any]):
    """The engine for URLs of ``protocol``, configured with fsspec-style ``options``.

    obstore's runtime does not survive ``fork()``: in a child forked after the
    parent used it, S3 goes through s3fs instead (same options, slower).
    """
    from dask_staging.engines.generic import FsspecEngine

    if protocol in ("s3", "s3a"):
        from dask_staging.engines import s3

        if s3.usable_here():
            return s3.S3Engine(options)
        logger.warning("obstore cannot run in a forked child of a process that used it; using s3fs")

    return FsspecEngine(protocol, options)
