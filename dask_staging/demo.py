"""``make demo``: stage objects from S3, read them back through ``staged::``, report speeds.

Uses the S3 endpoint in ``AWS_ENDPOINT_URL`` (with the usual AWS credentials);
without one it starts an embedded S3 server (moto) in this process.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import s3fs
from dask.utils import format_bytes
from fsspec.callbacks import TqdmCallback

from dask_staging import Cache

BUCKET = os.environ.get("DEMO_BUCKET", "dask-staging-demo")


def start_embedded_s3() -> object:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="demo",
        AWS_SECRET_ACCESS_KEY="demo-secret",
        AWS_REGION="us-east-1",
    )
    return server


def upload_sample(fs: s3fs.S3FileSystem) -> list[str]:
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    rng = np.random.default_rng(42)
    urls = []
    for i in range(8):
        df = pd.DataFrame(
            {
                "station": rng.integers(0, 50, 200_000),
                "temperature": rng.normal(15, 8, 200_000),
            }
        )
        path = f"{BUCKET}/weather/part-{i:02d}.parquet"
        with fs.open(path, "wb") as f:
            df.to_parquet(f)
        urls.append(f"s3://{path}")
    blob = f"{BUCKET}/raw/blob.bin"
    fs.pipe(blob, rng.bytes(48 << 20))
    urls.append(f"s3://{blob}")
    return urls


def stage_sample_database(root: str) -> str:
    """A small SQLite database (the embedded default) to stage a query from."""
    import sqlite3

    path = root.rstrip("/") + "-readings.db"
    rng = np.random.default_rng(7)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE IF EXISTS readings")
        conn.execute("CREATE TABLE readings (station INTEGER, temperature REAL)")
        stations, temperatures = rng.integers(0, 50, 100_000), rng.normal(15, 8, 100_000)
        rows = zip(stations.tolist(), temperatures.tolist(), strict=True)
        conn.executemany("INSERT INTO readings VALUES (?, ?)", rows)
    return f"sqlite:///{path}"


def main() -> int:
    server = None
    if not os.environ.get("AWS_ENDPOINT_URL"):
        server = start_embedded_s3()
        print(f"no AWS_ENDPOINT_URL set: embedded S3 server at {os.environ['AWS_ENDPOINT_URL']}")
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    fs = s3fs.S3FileSystem(endpoint_url=endpoint)
    urls = upload_sample(fs)
    root = os.environ.get("DEMO_CACHE_ROOT") or tempfile.mkdtemp(prefix="dask-staging-demo-")
    cache = Cache(root, max_bytes="1 GiB")
    print(f"staging {len(urls)} objects from {endpoint} into {root}")

    t0 = time.perf_counter()
    callback = TqdmCallback(
        tqdm_kwargs={
            "unit": "B",
            "unit_scale": True,
            "unit_divisor": 1024,
            "file": sys.stdout,
            "desc": "stage",
        }
    )
    cache.stage(urls, callback=callback)
    callback.close()
    cold = time.perf_counter() - t0
    staged = cache.stats()["bytes_staged"]

    import dask.dataframe as dd

    options = {"staged": {"root": root, "max_bytes": "1 GiB"}}
    t0 = time.perf_counter()
    ddf = dd.read_parquet(f"staged::s3://{BUCKET}/weather/", storage_options=options)
    summary = ddf.groupby("station").temperature.mean().compute()
    warm = time.perf_counter() - t0

    db = stage_sample_database(root)
    t0 = time.perf_counter()
    query = "SELECT station, avg(temperature) AS mean FROM readings GROUP BY station"
    table = pd.read_parquet(cache.stage_query(db, query))
    sql_seconds = time.perf_counter() - t0

    rounds = 100
    t0 = time.perf_counter()
    for _ in range(rounds):
        for url in urls:
            cache.get(url)
    hit = (time.perf_counter() - t0) / (rounds * len(urls))

    print()
    print("cached entries:")
    for e in cache.entries():
        print(f"  {format_bytes(e.size):>10}  hits={e.hits:<3} {e.url}")
    print()
    rate = format_bytes(staged / cold)
    print(f"stage-in:              {format_bytes(staged)} in {cold:.2f} s ({rate}/s)")
    print(f"dask over staged::     {len(summary)} station means in {warm:.2f} s, no S3 reads")
    print(f"SQL query staged:      {len(table)} rows as Parquet in {sql_seconds:.2f} s ({db})")
    print(f"cache hit (Cache.get): {hit * 1e6:.0f} µs per object")
    cache.close()
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
