"""Cache index at scale: lookup latency and LRU eviction with 1,000,000 entries.

    .venv/bin/python benchmarks/bench_index.py [--entries 1000000]

Rows are inserted directly (no files on disk), so eviction time here is the
index's share: finding LRU candidates, the lock probe per file and the deletes.
Results go to benchmarks/results/index.json.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from dask_staging import Cache, layout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import Results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="exa-index-bench-"))
    cache = Cache(root)
    n = args.entries
    now = time.time()
    start = time.perf_counter()
    batch = []
    for i in range(n):
        url = f"s3://bucket/data/object-{i:08d}.parquet"
        batch.append(
            {
                "url": url,
                "path": layout.relative_path(url),
                "size": 1000,
                "etag": "e",
                "state": "ready",
                "created": now,
                "last_access": now - n + i,
                "pinned": False,
                "hits": 0,
            }
        )
        if len(batch) == 50_000:
            cache.index.bulk_insert_ready(batch)
            batch = []
    if batch:
        cache.index.bulk_insert_ready(batch)
    inserted = time.perf_counter() - start
    print(f"inserted {n} rows in {inserted:.1f} s")

    urls = [f"s3://bucket/data/object-{random.randrange(n):08d}.parquet" for _ in range(20000)]
    latencies = []
    for url in urls:
        t = time.perf_counter()
        cache.index.lookup(url)
        latencies.append(time.perf_counter() - t)
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1e3
    p99 = latencies[int(len(latencies) * 0.99)] * 1e3
    print(f"lookup: p50 {p50:.3f} ms, p99 {p99:.3f} ms")

    t = time.perf_counter()
    freed = cache.evict(to_bytes=int(n * 1000 * 0.9))
    elapsed = time.perf_counter() - t
    print(f"evict 10% ({freed // 1000} entries): {elapsed:.2f} s")
    cache.close()
    results = Results(
        "index",
        f"Cache index at scale (`benchmarks/bench_index.py`, {n:,} entries, SQLite WAL)\n"
        "Rows are inserted directly (no files on disk), so eviction time is the index's share: "
        "finding LRU candidates, the lock probe per file and the deletes.",
    )
    results.scenario(
        "lookup",
        f"Lookup latency with {n:,} entries (20,000 random lookups)",
        [{"contender": "lookup, median", "ms": p50}, {"contender": "lookup, p99", "ms": p99}],
        value="ms",
        unit="ms",
        higher_is_better=False,
        target="p99 ≤ 1 ms",
    )
    results.scenario(
        "bulk",
        f"Bulk operations on {n:,} entries",
        [
            {"contender": f"insert {n:,} ready entries", "seconds": inserted},
            {"contender": f"evict 10 % ({freed // 1000:,} entries, LRU)", "seconds": elapsed},
        ],
        value="seconds",
        unit="seconds",
        higher_is_better=False,
    )
    results.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
