"""Preload module: ``dask worker --preload dask_staging.preload`` opens the node's cache.

Settings come from the ``staging`` config (``DASK_STAGING__ROOT`` etc.), so
workers started by scripts, Helm or dask-jobqueue need no code::

    DASK_DISTRIBUTED__WORKER__PRELOAD='["dask_staging.preload"]' \\
    DASK_STAGING__ROOT='$TMPDIR/stage' dask worker tcp://scheduler:8786
"""

from __future__ import annotations

from dask_staging.plugin import StagingPlugin


async def dask_setup(worker) -> None:
    await worker.plugin_add(StagingPlugin())
