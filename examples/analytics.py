"""Dask analytics on staged data: Parquet from S3 and the result of a SQL query.

    python examples/analytics.py                 # LocalCluster on this machine
    python examples/analytics.py --slurm         # workers as Slurm jobs (dask-jobqueue)

S3 comes from the AWS variables (AWS_ENDPOINT_URL for MinIO/Ceph); the
database from --db (default: a SQLite file made here).  Every node downloads
each object once into its cache; a second pass reads only local disk.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time

import dask.dataframe as dd
import numpy as np
import pandas as pd
import s3fs
from distributed import Client, LocalCluster

from dask_staging import StagingPlugin, prefetch, worker_stats
from dask_staging.plugin import worker_cache

BUCKET = os.environ.get("EXAMPLE_BUCKET", "dask-staging-examples")


def make_sample_data(db_path: str) -> list[str]:
    """A Parquet dataset in S3 and a SQLite table, unless they exist."""
    fs = s3fs.S3FileSystem()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    rng = np.random.default_rng(0)
    urls = []
    for i in range(6):
        path = f"{BUCKET}/weather/part-{i:02d}.parquet"
        if not fs.exists(path):
            frame = pd.DataFrame(
                {
                    "station": rng.integers(0, 20, 100_000),
                    "temperature": rng.normal(12, 6, 100_000),
                }
            )
            with fs.open(path, "wb") as f:
                frame.to_parquet(f)
        urls.append(f"s3://{path}")
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS stations (station INTEGER, name TEXT)")
        if not conn.execute("SELECT count(*) FROM stations").fetchone()[0]:
            conn.executemany(
                "INSERT INTO stations VALUES (?, ?)", [(i, f"station-{i}") for i in range(20)]
            )
    return urls


def station_names(db_url: str) -> pd.DataFrame:
    """Runs on a worker: stage the query on that node, read the Parquet result."""
    path = worker_cache().stage_query(db_url, "SELECT station, name FROM stations")
    return pd.read_parquet(path)


def staged_bytes(client) -> int:
    return sum(s["bytes_staged"] for s in worker_stats(client).values())


def start_cluster(args) -> object:
    if not args.slurm:
        return LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0")
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        python=sys.executable,
        scheduler_options={"host": "127.0.0.1"},
        worker_extra_args=["--host", "127.0.0.1"],
        # the cache lives on the node-local disk of whichever node the job lands on
        job_script_prologue=[f"export DASK_STAGING__ROOT='{args.root}'"],
    )
    cluster.scale(jobs=args.workers)
    return cluster


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slurm", action="store_true", help="run workers as Slurm jobs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--root",
        default=None,
        help="cache root on each node; $VARS expand on the worker (default: a temp dir, "
        "per Slurm node with --slurm)",
    )
    parser.add_argument("--db", default=None, help="SQLAlchemy URL (default: a SQLite file)")
    args = parser.parse_args(argv)
    node = "-$SLURMD_NODENAME" if args.slurm else ""
    args.root = args.root or os.path.join(tempfile.gettempdir(), f"dask-staging-example{node}")
    db_path = os.path.join(tempfile.gettempdir(), "dask-staging-example.db")
    urls = make_sample_data(db_path)
    db_url = args.db or f"sqlite:///{db_path}"

    with start_cluster(args) as cluster, Client(cluster) as client:
        client.wait_for_workers(args.workers, timeout=120)
        client.register_plugin(StagingPlugin(root=args.root))
        for attempt in ("first", "second"):
            before = staged_bytes(client)
            start = time.perf_counter()
            weather = dd.read_parquet(f"staged::s3://{BUCKET}/weather/")
            means = weather.groupby("station").temperature.mean().compute()
            seconds = time.perf_counter() - start
            moved = staged_bytes(client) - before
            print(
                f"{attempt} pass: {len(means)} station means in {seconds:.2f} s, "
                f"{moved} bytes staged from S3"
            )
        held = prefetch(client, urls)  # already cached: nothing moves
        print(f"{len(urls)} objects held on {len(held)} node(s)")
        names = client.submit(station_names, db_url, pure=False).result()
        table = names.merge(means.rename("mean").reset_index(), on="station")
        print(table.sort_values("mean").head(3).to_string(index=False))
        print(f"bytes staged from S3 by all workers: {staged_bytes(client)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
