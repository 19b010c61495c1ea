"""The data-path hierarchy on this machine, measured with ``dask-staging bench``.

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_hierarchy.py [--max-seconds 240]

Measures the local file system, MinIO on loopback, the same MinIO through
toxiproxy emulating a WAN link (10 ms, 50 MB/s per connection), and
PostgreSQL, then asks for advice on a 100 GiB dataset read 3 times.  Results
go to benchmarks/results/hierarchy.json and docs/benchmarks/hierarchy-rates.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import s3fs

from dask_staging.bench import advise, run_benchmark
from dask_staging.bench.report import plot

sys.path.insert(0, str(Path(__file__).parent))
import links
from results import Results

ENDPOINT = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")
USER = os.environ.get("EXA_MINIO_USER", "exa-minio")
PASSWORD = os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret")
PG_URL = os.environ.get("EXA_PG_URL", "postgresql://postgres:exa-pg-secret@127.0.0.1:5433/postgres")
BUCKET = "exa-bench-hierarchy"
MiB = 1 << 20
DATASET, READS = 100 << 30, 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-seconds", type=float, default=240)
    args = parser.parse_args()
    fs = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=ENDPOINT)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    wan = links.wan(latency_ms=10, rate_kbs=50_000)
    common = {"max_seconds": args.max_seconds, "max_bytes": 24 << 30, "progress": True}
    measurements = []
    with tempfile.TemporaryDirectory(prefix="exa-hierarchy-") as local:
        runs = [
            {"fs": [local], "fs_size": 1024 * MiB},
            {"s3": f"s3://{BUCKET}/loopback", "sizes": [MiB, 16 * MiB, 256 * MiB, 1024 * MiB],
             "streams": [1, 4, 16, 64], "storage_options": {"endpoint_url": ENDPOINT}},
            {"s3": f"s3://{BUCKET}/wan", "sizes": [16 * MiB, 256 * MiB], "streams": [1, 4, 16, 64],
             "small_objects": 50, "storage_options": {"endpoint_url": wan}},
            {"db": PG_URL, "db_rows": 2_000_000},
        ]  # fmt: skip
        os.environ.update(AWS_ACCESS_KEY_ID=USER, AWS_SECRET_ACCESS_KEY=PASSWORD)
        for options in runs:
            result = run_benchmark(**common, **options)
            for m in result["measurements"]:
                if m["tier"] == "s3":
                    m["target"] = "S3 over WAN" if m["target"].startswith(wan) else "S3 loopback"
                if m["tier"] == "fs":
                    m["target"] = "local disk"
                measurements.append(m)
    plot(measurements, "docs/benchmarks/hierarchy-rates.png", title="dask-staging bench")
    results = Results(
        "hierarchy",
        "Data-path hierarchy on this machine (`benchmarks/bench_hierarchy.py`)\n"
        "Read and write rates of the local disk, MinIO on loopback, the same MinIO through a "
        "WAN-like link (toxiproxy: 10 ms, 50 MB/s per connection) and PostgreSQL, as "
        "`dask-staging bench` measures them. ![rates](benchmarks/hierarchy-rates.png)",
    )
    for tier, title in (("fs", "File system"), ("s3", "S3"), ("db", "PostgreSQL")):
        rows = [
            {
                "contender": " · ".join(
                    str(x)
                    for x in (
                        m["target"], m["op"], m["method"],
                        f"{m['streams']} stream{'s' if m['streams'] > 1 else ''}"
                        if m["tier"] == "s3" else None,
                        f"{m['objects']} × {m['object_size'] // 1024} KiB" if m["objects"] > 1
                        else (f"{m['object_size'] // MiB} MiB" if m["object_size"] else None),
                    )
                    if x
                ),
                "mbps": m["mb_per_s"],
            }
            for m in measurements
            if m["tier"] == tier
        ]  # fmt: skip
        results.scenario(tier, title, rows, value="mbps", unit="MB/s")
    wan_only = [m for m in measurements if m["tier"] != "s3" or m["target"] == "S3 over WAN"]
    rows = []
    for link, subset in (("loopback", measurements), ("WAN", wan_only)):
        subset = [m for m in subset if link == "WAN" or m["target"] != "S3 over WAN"]
        for a in advise(subset, DATASET, READS):
            rows.append(
                {
                    "contender": f"{a.source} ({link})" if a.source == "S3" else a.source,
                    "direct_s": a.direct_seconds,
                    "staged_s": a.staged_seconds,
                    "advice": "stage" if a.stage else "read directly",
                }
            )
    seen, unique = set(), []
    for row in rows:
        if row["contender"] not in seen:
            seen.add(row["contender"])
            unique.append(row)
    results.scenario(
        "advice",
        f"Advice for a 100 GiB dataset read {READS} times",
        unique,
        value="direct_s",
        unit="seconds reading directly",
        higher_is_better=False,
        columns={"staged_s": "seconds staging, then reading locally", "advice": "advice"},
        note="Direct: one stream per file for S3, a server-side cursor for the database. "
        "Staged: the fastest measured stage-in, then every read from the local disk.",
    )
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
