"""PostgreSQL ↔ Parquet on a 5 M-row table (bigint, double, text), side by side with baselines.

Run with the services up (``make bench`` does both)::

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_postgres.py [--rows 5000000] [--rounds 3]

Read side: ``Cache.stage_query`` against ``COPY … TO STDOUT (FORMAT binary)``
into a file, connectorx (Arrow) + Parquet and ``pandas.read_sql`` +
``to_parquet``; peak RSS is measured in a fresh child process per contender.
Write side: ``write_table`` against one ``COPY … FROM STDIN`` (binary and CSV)
of the same data and ``DataFrame.to_sql``, with a curve over writers and batch
size.  Results go to benchmarks/results/postgres.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psycopg2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import Results

PG_URL = os.environ.get("EXA_PG_URL", "postgresql://postgres:exa-pg-secret@127.0.0.1:5433/postgres")
TABLE = "bench_rows"


def prepare(rows: int) -> None:
    conn = psycopg2.connect(PG_URL)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_tables WHERE tablename = %s", (TABLE,))
        if cur.fetchone()[0]:
            cur.execute(f"SELECT count(*) FROM {TABLE}")
            if cur.fetchone()[0] == rows:
                return
            cur.execute(f"DROP TABLE {TABLE}")
        cur.execute(
            f"CREATE TABLE {TABLE} AS SELECT g::bigint AS id, random() * 1000 AS value, "
            f"md5(g::text) AS label FROM generate_series(1, {rows}) g"
        )
        cur.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)")  # what partition_on needs
        cur.execute(f"ANALYZE {TABLE}")
    conn.close()


# Each contender runs in a fresh interpreter so that its peak RSS is its own.
CHILD = r"""
import json, os, resource, sys, time
import pandas as pd, psycopg2, sqlalchemy as sa
from dask_staging import Cache
import dask_staging.sql.postgres  # imports are not timed
mode, work = sys.argv[1], sys.argv[2]
url, table = os.environ["EXA_PG_URL"], os.environ["BENCH_TABLE"]
start = time.perf_counter()
if mode.startswith("copy-"):
    fmt = mode.split("-")[1]
    with psycopg2.connect(url) as conn, conn.cursor() as cur, open(f"{work}/copy.{fmt}", "wb") as f:
        cur.copy_expert(f"COPY (SELECT * FROM {table}) TO STDOUT (FORMAT {fmt})", f)
elif mode.startswith("stage_query"):
    parts = int(mode.split(":")[1]) if ":" in mode else None
    Cache(f"{work}/cache-{mode}").stage_query(
        url, f"SELECT * FROM {table}", partition_on="id" if parts else None, partitions=parts)
elif mode == "connectorx":
    import connectorx as cx, pyarrow.parquet as pq
    pq.write_table(cx.read_sql(url, f"SELECT * FROM {table}", return_type="arrow"),
                   f"{work}/connectorx.parquet")
elif mode == "read_sql":
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    pd.read_sql(f"SELECT * FROM {table}", engine).to_parquet(f"{work}/read_sql.parquet")
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(mode: str, work: str) -> dict:
    env = dict(os.environ, EXA_PG_URL=PG_URL, BENCH_TABLE=TABLE)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, work],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_runs(rounds: int, fn) -> dict:
    runs = [fn() for _ in range(rounds)]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "rss_mib": max(r["rss_mib"] for r in runs),
    }


def bench_read(work: str, rounds: int) -> dict:
    out = {}
    for _ in range(rounds):
        for mode in ("copy-binary", "stage_query", "stage_query:2", "stage_query:4", "connectorx"):
            subprocess.run(["rm", "-rf", f"{work}/cache-{mode}"], check=True)
            out.setdefault(mode, []).append(child(mode, work))
    result = {
        mode: {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "rss_mib": max(r["rss_mib"] for r in runs),
        }
        for mode, runs in out.items()
    }
    result["read_sql"] = child("read_sql", work)  # ~15 s and GiBs of RAM: once
    return result


def copy_from(path: str, table: str, fmt: str) -> float:
    """One COPY into a new table created in the same transaction (as write_table does)."""
    conn = psycopg2.connect(PG_URL)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
    conn.commit()
    start = time.perf_counter()
    with conn.cursor() as cur, open(path, "rb") as f:
        cur.execute(f"CREATE TABLE {table} (id bigint, value float8, label text)")
        cur.copy_expert(f"COPY {table} FROM STDIN (FORMAT {fmt})", f)
    conn.commit()
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def drop(table: str) -> None:
    conn = psycopg2.connect(PG_URL)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
    conn.close()


def bench_write(work: str, rounds: int, rows: int) -> dict:
    import pandas as pd

    from dask_staging import Cache, write_table

    parquet = Cache(f"{work}/w-cache").stage_query(PG_URL, f"SELECT * FROM {TABLE}")
    child("copy-binary", work)
    child("copy-csv", work)
    curve = {}
    baseline, baseline_csv = [], []
    for _ in range(rounds):
        baseline.append(copy_from(f"{work}/copy.binary", "bench_copy_from", "binary"))
        baseline_csv.append(copy_from(f"{work}/copy.csv", "bench_copy_from", "csv"))
        for writers in (1, 2, 4, 8):
            for batch_rows in (65_536, 262_144, 1_048_576):
                drop("bench_write")
                start = time.perf_counter()
                n = write_table(
                    parquet,
                    PG_URL,
                    "bench_write",
                    mode="create",
                    writers=writers,
                    batch_rows=batch_rows,
                )
                assert n == rows
                name = f"{writers} writer{'s' if writers > 1 else ''}, {batch_rows:,} rows/batch"
                curve.setdefault(name, []).append(time.perf_counter() - start)
    drop("bench_copy_from")
    sample = min(rows, 200_000)
    frame = pd.read_parquet(parquet).head(sample)
    import sqlalchemy as sa

    engine = sa.create_engine(PG_URL.replace("postgresql://", "postgresql+psycopg2://"))
    drop("bench_to_sql")
    start = time.perf_counter()
    frame.to_sql("bench_to_sql", engine, index=False)
    to_sql_rows_per_s = sample / (time.perf_counter() - start)
    drop("bench_to_sql")
    drop("bench_write")
    return {
        "copy_from_seconds": statistics.median(baseline),
        "copy_from_csv_seconds": statistics.median(baseline_csv),
        "write_table_seconds": {k: statistics.median(v) for k, v in curve.items()},
        "to_sql_rows_per_s": to_sql_rows_per_s,
        "to_sql_sample_rows": sample,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    prepare(args.rows)
    work = tempfile.mkdtemp(prefix="exa-pg-bench-")
    read = bench_read(work, args.rounds)
    write = bench_write(work, args.rounds, args.rows)
    subprocess.run(["rm", "-rf", work], check=True)
    results = Results(
        "postgres",
        f"PostgreSQL ↔ Parquet (`benchmarks/bench_postgres.py`, {args.rows:,} rows)\n"
        "A table of bigint, double and text columns in PostgreSQL 15 on this machine; server "
        "and client share its cores. Each reader runs in a fresh process, so its peak RSS is its "
        f"own. Medians of {args.rounds} rounds (pandas.read_sql, which takes GiBs, runs once).",
    )
    names = {
        "copy-binary": "COPY TO binary → file",
        "stage_query": "dask_staging stage_query",
        "stage_query:2": "dask_staging stage_query, 2 partitions",
        "stage_query:4": "dask_staging stage_query, 4 partitions",
        "connectorx": "connectorx (Arrow) → Parquet",
        "read_sql": "pandas.read_sql → Parquet",
    }
    results.scenario(
        "read",
        "PostgreSQL → Parquet",
        [
            {
                "contender": names[mode],
                "seconds": r["seconds"],
                "rows_per_s": args.rows / r["seconds"],
                "rss_mib": r["rss_mib"],
            }
            for mode, r in read.items()
        ],
        value="seconds",
        unit="seconds",
        baseline="COPY TO binary → file",
        higher_is_better=False,
        columns={"rows_per_s": "rows/s", "rss_mib": "peak RSS (MiB)"},
        target="stage_query ≤ 1.5× the time of COPY TO binary",
    )
    rows = [
        {"contender": "COPY FROM binary (one connection)", "seconds": write["copy_from_seconds"]},
        {"contender": "COPY FROM csv (one connection)", "seconds": write["copy_from_csv_seconds"]},
    ]
    for name, seconds in write["write_table_seconds"].items():
        rows.append({"contender": f"dask_staging write_table, {name}", "seconds": seconds})
    rows.append(
        {
            "contender": f"DataFrame.to_sql (rate over {write['to_sql_sample_rows']:,} rows)",
            "seconds": args.rows / write["to_sql_rows_per_s"],
        }
    )
    for row in rows:
        row["rows_per_s"] = args.rows / row["seconds"]
    results.scenario(
        "write",
        "Parquet → PostgreSQL (a new table)",
        rows,
        value="seconds",
        unit="seconds",
        baseline="COPY FROM binary (one connection)",
        higher_is_better=False,
        columns={"rows_per_s": "rows/s"},
        note="to_sql is timed on a sample and its rate scaled to the full table.",
    )
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
