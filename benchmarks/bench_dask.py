"""8 Dask workers on one node, two passes over the same dataset: bytes from S3 and time.

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_dask.py [--gib 2] [--workers 8]

Side by side in one run: plain ``s3://`` reads (s3fs), fsspec's
``simplecache::`` (a cache per worker process) and ``staged::`` with
StagingPlugin (one cache per node).  Bytes fetched are counted by MinIO itself.
Results go to benchmarks/results/dask.json.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request

import fsspec
import numpy as np
import s3fs
from distributed import Client, LocalCluster

from dask_staging import StagingPlugin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import links
from results import Results

ENDPOINT = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")
USER = os.environ.get("EXA_MINIO_USER", "exa-minio")
PASSWORD = os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret")
BUCKET = "exa-bench-dask"
OBJECT = 64 << 20


def sent_bytes() -> int:
    with urllib.request.urlopen(f"{ENDPOINT}/minio/metrics/v3/api/requests") as r:
        text = r.read().decode()
    return int(
        float(
            re.search(r"^minio_api_requests_traffic_sent_bytes\{[^}]*\} (\S+)$", text, re.M).group(
                1
            )
        )
    )


def prepare(gib: float) -> list[str]:
    fs = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=ENDPOINT)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    count = int(gib * (1 << 30) // OBJECT)
    urls = []
    for i in range(count):
        path = f"{BUCKET}/blobs/blob-{i:04d}.bin"
        if not fs.exists(path):
            fs.pipe(path, os.urandom(OBJECT))
        urls.append(f"s3://{path}")
    return urls


def byte_sum(url: str, prefix: str, options: dict) -> int:
    """The computation: read the whole object and sum its bytes."""
    total = 0
    with fsspec.open(prefix + url, "rb", **options) as f:
        while chunk := f.read(8 << 20):
            total += int(np.frombuffer(chunk, dtype=np.uint8).sum())
    return total


def two_passes(client, urls, prefix: str, options: dict) -> dict:
    out = {}
    for name in ("first", "second"):
        before = sent_bytes()
        start = time.perf_counter()
        client.gather(client.map(byte_sum, urls, prefix=prefix, options=options, pure=False))
        seconds = time.perf_counter() - start
        out[name] = {"seconds": seconds, "gib_from_s3": (sent_bytes() - before) / (1 << 30)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    links.use_minio()
    urls = prepare(args.gib)
    work = tempfile.mkdtemp(prefix="exa-dask-bench-")
    s3opts = {"key": USER, "secret": PASSWORD, "endpoint_url": ENDPOINT}
    modes = {
        "s3:// (s3fs)": ("", s3opts),
        "simplecache::s3://": ("simplecache::", {"s3": s3opts}),
        "staged::s3:// + StagingPlugin": ("staged::", {}),
    }
    results = {}
    with (
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(StagingPlugin(root=f"{work}/node-cache", min_free=0))
        for name, (prefix, options) in modes.items():
            results[name] = two_passes(client, urls, prefix, options)
        # Every worker reads the whole dataset, into a fresh node cache.
        client.unregister_worker_plugin("dask-staging")
        client.register_plugin(StagingPlugin(root=f"{work}/fresh-cache", min_free=0))
        workers = list(client.scheduler_info()["workers"])
        before = sent_bytes()
        start = time.perf_counter()
        futures = [
            client.submit(byte_sum, url, prefix="staged::", options={}, workers=[w], pure=False)
            for w in workers
            for url in urls
        ]
        client.gather(futures)
        everyone = {
            "seconds": time.perf_counter() - start,
            "gib_from_s3": (sent_bytes() - before) / (1 << 30),
        }
    shutil.rmtree(work, ignore_errors=True)
    report = Results(
        "dask",
        f"Dask: {args.workers} workers on one node (`benchmarks/bench_dask.py`, "
        f"{args.gib:g} GiB in {len(urls)} × 64 MiB objects)\n"
        "Each task reads one object whole and sums its bytes; the dataset is read twice by the "
        "same workers. Bytes sent by S3 are counted by MinIO's own metrics.",
    )
    report.scenario(
        "passes",
        "Second pass over the same dataset",
        [
            {
                "contender": name,
                "second_s": r["second"]["seconds"],
                "first_s": r["first"]["seconds"],
                "gib_first": r["first"]["gib_from_s3"],
                "gib_second": r["second"]["gib_from_s3"],
                "second_vs_first": r["second"]["seconds"] / r["first"]["seconds"],
            }
            for name, r in results.items()
        ],
        value="second_s",
        unit="seconds, pass 2",
        baseline="s3:// (s3fs)",
        higher_is_better=False,
        columns={
            "first_s": "seconds, pass 1",
            "gib_first": "GiB from S3, pass 1",
            "gib_second": "GiB from S3, pass 2",
            "second_vs_first": "pass 2 / pass 1",
        },
        target="staged:: pass 2 ≤ 0.5× its pass 1, with no bytes from S3",
    )
    report.scenario(
        "everyone",
        "Every worker reads the whole dataset (staged::, fresh node cache)",
        [
            {
                "contender": f"{args.workers} workers × {args.gib:g} GiB",
                "gib_read": args.workers * args.gib,
                "seconds": everyone["seconds"],
                "gib_from_s3": everyone["gib_from_s3"],
            }
        ],
        value="gib_from_s3",
        unit="GiB from S3",
        higher_is_better=False,
        columns={"gib_read": "GiB read", "seconds": "seconds"},
        target=f"{args.gib:g} GiB from S3: one download per object per node",
    )
    report.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
