"""``dask-staging bench``: measure the data paths from where it runs, and advise.

For research on HPC systems the question is often: can I read from the database
or object store directly, or must I stage the data first?  This package
measures, from the machine it runs on, the read and write rates of an S3
endpoint (by stream count and object size, and for many small objects), a
PostgreSQL server (COPY and SELECT out, COPY in) and local or scratch file
systems, within a bounded time and byte budget.  :func:`advise` then turns the
rates into stage-or-read-directly advice for a given dataset.

Examples
--------
>>> from dask_staging.bench import run_benchmark, advise
>>> results = run_benchmark(fs=["/scratch/me"], s3="s3://bucket/tmp")  # doctest: +SKIP
>>> advise(results["measurements"], dataset_bytes=100 << 30, reads=3)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import platform
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from dask_staging.bench.advice import Advice, advise
from dask_staging.bench.budget import Budget, Measurement

__all__ = [
    "Advice",
    "Budget",
    "Measurement",
    "advise",
    "on_workers",
    "run_and_advise",
    "run_benchmark",
]

MiB = 1 << 20
DEFAULT_SIZES = (1 * MiB, 16 * MiB, 256 * MiB, 1024 * MiB)
DEFAULT_STREAMS = (1, 4, 16, 64)


def run_benchmark(
    *,
    fs: Sequence[str] = (),
    s3: str | None = None,
    db: str | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    streams: Sequence[int] = DEFAULT_STREAMS,
    small_objects: int = 200,
    small_size: int = 256 << 10,
    db_rows: int = 1_000_000,
    fs_size: int = 1024 * MiB,
    max_seconds: float = 300.0,
    max_bytes: int = 8 << 30,
    repeat: int = 1,
    progress: bool = False,
    storage_options: dict | None = None,
) -> dict:
    """Measure every path asked for; returns ``{"host", "measurements", "skipped", ...}``.

    Parameters
    ----------
    fs : list of str
        Directories to measure sequential write and read in (node-local disk, scratch).
    s3 : str, optional
        ``s3://bucket/prefix`` where test objects may be written; they are deleted afterwards.
    db : str, optional
        PostgreSQL URL; a table of ``db_rows`` rows is created, measured and dropped.
    max_seconds, max_bytes : float, int
        The whole run stops starting new measurements past this time or these bytes moved.
    """
    if not (fs or s3 or db):
        raise ValueError("nothing to measure: give at least one file system, S3 prefix or database")
    if s3 and not s3.startswith("s3://"):
        raise ValueError(f"--s3 must be an s3://bucket/prefix URL, not {s3!r}")
    if db:  # fail before spending the budget elsewhere
        from dask_staging.bench.sql import connect

        connect(db).close()
    budget = Budget(max_seconds, max_bytes, repeat=repeat, progress=progress)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="dask-staging-bench-") as work:
        for path in fs:
            from dask_staging.bench.files import measure_fs

            measure_fs(path, budget, size=fs_size)
        if s3:
            from dask_staging.bench.s3 import measure_s3

            measure_s3(
                s3,
                budget,
                work=Path(work),
                sizes=sizes,
                streams=streams,
                small_objects=small_objects,
                small_size=small_size,
                storage_options=storage_options or {},
            )
        if db:
            from dask_staging.bench.sql import measure_db

            measure_db(db, budget, rows=db_rows, work=Path(work))
    budget.close()
    return {
        "host": socket.gethostname(),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "started": started,
        "seconds": time.time() - started,
        "measurements": [m.to_dict() for m in budget.measurements],
        "skipped": budget.skipped,
    }


def run_and_advise(
    *, root: str, dataset_bytes: int | None = None, reads: int = 1, **options
) -> dict:
    """:func:`run_benchmark` with ``root`` (where data would be staged) measured first,
    plus ``"advice"`` for a dataset of ``dataset_bytes`` read ``reads`` times."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    fs = [str(root), *[p for p in options.pop("fs", ()) if str(p) != str(root)]]
    results = run_benchmark(fs=fs, **options)
    if dataset_bytes:
        advice = advise(results["measurements"], dataset_bytes, reads, local=str(root))
        results["advice"] = {
            "dataset_bytes": dataset_bytes,
            "reads": reads,
            "sources": [vars(a) for a in advice],
            "text": [a.text(dataset_bytes, reads) for a in advice],
        }
    return results


def on_workers(client, *, one_per_host: bool = True, **options) -> dict[str, dict]:
    """Run :func:`run_and_advise` on Dask workers (one per host by default), so the
    rates are the compute nodes' own; returns ``{worker address: results}``.

    ``root`` may hold ``$VARS`` that expand on each worker (e.g. ``$TMPDIR/stage``).
    """
    workers = client.scheduler_info()["workers"]
    chosen: dict[str, str] = {}
    for address, info in sorted(workers.items()):
        key = info.get("host", address) if one_per_host else address
        chosen.setdefault(key, address)
    futures = {
        address: client.submit(run_and_advise, workers=[address], pure=False, **options)
        for address in chosen.values()
    }
    return {address: future.result() for address, future in futures.items()}
