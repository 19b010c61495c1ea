"""Query results staged as Parquet, and tables loaded from Arrow data, on real PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_staging import Cache, write_table
from dask_staging.sql import QueryError

ROWS = 20_000


@pytest.fixture
def runs(pg):
    """A table of ROWS rows with a bigint key, doubles, text and NULLs."""
    conn, prefix = pg
    table = f"{prefix}_runs"
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {table} AS SELECT g::bigint AS id, g * 0.5 AS value, "
            f"CASE WHEN g % 10 = 0 THEN NULL ELSE md5(g::text) END AS label "
            f"FROM generate_series(1, {ROWS}) g"
        )
    return table


def tmp_is_empty(root) -> bool:
    return not any((root / "tmp").iterdir())


def test_stage_query_round_trip_and_hit(pg_url, runs, cache_root):
    cache = Cache(cache_root)
    path = cache.stage_query(pg_url, f"SELECT * FROM {runs} ORDER BY id")
    df = pd.read_parquet(path)
    assert len(df) == ROWS and df.id.tolist() == list(range(1, ROWS + 1))
    assert df.label.isna().sum() == ROWS // 10 and df.value.iloc[1] == 1.0
    assert cache.stage_query(pg_url, f"  SELECT * FROM {runs} ORDER BY id ;\n") == path
    [entry] = cache.entries()
    assert entry.url.startswith("sql+postgresql://postgres@127.0.0.1:5433/postgres#")
    assert "exa-pg-secret" not in entry.url and entry.hits == 1
    assert cache.verify() == []


def test_partitioned_read_covers_every_row_once(pg_url, runs, cache_root):
    import dask.dataframe as dd

    cache = Cache(cache_root)
    path = cache.stage_query(pg_url, f"SELECT * FROM {runs}", partition_on="id", partitions=3)
    assert sorted(os.listdir(path)) == [f"part-{i:04d}.parquet" for i in range(3)]
    df = dd.read_parquet(path).compute()
    assert len(df) == ROWS and df.id.nunique() == ROWS
    assert cache.verify() == []
    with pytest.raises(QueryError, match="must be numeric"):
        cache.stage_query(pg_url, f"SELECT * FROM {runs}", partition_on="label", partitions=2)


def test_ttl_and_version_query_refresh(pg, pg_url, runs, cache_root):
    conn, _ = pg
    cache = Cache(cache_root)
    count = f"SELECT count(*) AS n FROM {runs}"
    version = f"SELECT max(id) FROM {runs}"
    assert pd.read_parquet(cache.stage_query(pg_url, count, version_query=version)).n[0] == ROWS
    assert pd.read_parquet(cache.stage_query(pg_url, count)).n[0] == ROWS
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {runs} VALUES ({ROWS + 1}, 0, 'new')")
    assert pd.read_parquet(cache.stage_query(pg_url, count)).n[0] == ROWS  # cached
    assert pd.read_parquet(cache.stage_query(pg_url, count, ttl=0)).n[0] == ROWS + 1
    assert pd.read_parquet(cache.stage_query(pg_url, count, version_query=version)).n[0] == (
        ROWS + 1
    )


def test_query_parameters_are_part_of_the_key(pg_url, runs, cache_root):
    cache = Cache(cache_root)
    q = f"SELECT * FROM {runs} WHERE id <= $1"
    assert len(pd.read_parquet(cache.stage_query(pg_url, q, params=(10,)))) == 10
    assert len(pd.read_parquet(cache.stage_query(pg_url, q, params=(20,)))) == 20


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT * FROM no_such_table_xyz", 'relation "no_such_table_xyz" does not exist'),
        ("SELEC 1", 'syntax error at or near "SELEC"'),
        ("SELECT interval '1 day' AS span", "'span' (interval) cannot be stored in Parquet"),
        ("SELECT 1 AS x WHERE false", "the query returned no rows"),
    ],
)
def test_bad_queries_are_clear_and_leave_nothing(pg_url, cache_root, query, message):
    cache = Cache(cache_root)
    with pytest.raises(QueryError) as info:
        cache.stage_query(pg_url, query)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "exa-pg-secret" not in str(info.value)
    assert cache.entries() == [] and tmp_is_empty(cache_root)


def test_empty_results_can_be_allowed(pg_url, runs, cache_root):
    path = Cache(cache_root).stage_query(
        pg_url, f"SELECT * FROM {runs} WHERE false", allow_empty=True
    )
    assert pq.read_table(path).num_rows == 0
    assert pq.read_schema(path).names == ["id", "value", "label"]


def test_wrong_password_and_unreachable_host(pg_url, cache_root):
    cache = Cache(cache_root)
    bad = pg_url.replace("exa-pg-secret", "wrong-password-42")
    with pytest.raises(QueryError, match="password authentication failed") as info:
        cache.stage_query(bad, "SELECT 1")
    assert "wrong-password-42" not in str(info.value)
    with pytest.raises(QueryError, match=r"PostgreSQL at 127\.0\.0\.1:9/x.*Connection refused"):
        cache.stage_query("postgresql://u:pw-xyz@127.0.0.1:9/x", "SELECT 1")
    assert cache.entries() == [] and tmp_is_empty(cache_root)


def test_sqlite_is_the_embedded_default(tmp_path, cache_root):
    import sqlite3

    db = tmp_path / "local.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (k INTEGER, name TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(500)])
    cache = Cache(cache_root)
    path = cache.stage_query(f"sqlite:///{db}", "SELECT * FROM t WHERE k < ?", params=(100,))
    df = pd.read_parquet(path)
    assert len(df) == 100 and df.name.iloc[5] == "n5"
    with pytest.raises(QueryError, match="no such table"):
        cache.stage_query(f"sqlite:///{db}", "SELECT * FROM missing")


# -- write_table --------------------------------------------------------------------


def frame(n: int, start: int = 0) -> pd.DataFrame:
    ids = np.arange(start, start + n, dtype="int64")
    return pd.DataFrame({"id": ids, "value": ids * 0.25, "label": [f"row-{i}" for i in ids]})


def count(conn, table) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*), count(DISTINCT id) FROM {table}")
        total, distinct = cur.fetchone()
    assert total == distinct
    return total


def test_write_table_modes_and_sources(pg, pg_url, tmp_path):
    conn, prefix = pg
    table = f"{prefix}_out"
    parquet = tmp_path / "a.parquet"
    frame(50_000).to_parquet(parquet)
    assert write_table(parquet, pg_url, table, mode="create", writers=4, batch_rows=4096) == 50_000
    assert count(conn, table) == 50_000
    csv = tmp_path / "b.csv"
    frame(1000, start=50_000).to_csv(csv, index=False)
    assert write_table(csv, pg_url, table, mode="append") == 1000
    assert write_table(pa.Table.from_pandas(frame(10, 60_000)), pg_url, table) == 10
    assert count(conn, table) == 51_010
    assert write_table(frame(7, 90_000), pg_url, table, mode="replace") == 7
    assert count(conn, table) == 7
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE '\\_staging\\_%'")
        assert cur.fetchone()[0] == 0


def test_write_table_is_all_or_nothing(pg, pg_url):
    conn, prefix = pg
    table = f"{prefix}_strict"
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, value float8, label text)")
        cur.execute(f"INSERT INTO {table} VALUES (5, 0, 'existing')")
    # 20,000 new rows, one of which collides with the existing key at the very end
    with pytest.raises(QueryError, match="duplicate key value"):
        write_table(frame(20_000, start=-19_994), pg_url, table, writers=3)
    assert count(conn, table) == 1
    with pytest.raises(QueryError, match="does not exist; use mode='create'"):
        write_table(frame(3), pg_url, f"{prefix}_missing")


@pytest.mark.parametrize("name", ['x"; DROP TABLE y; --', "a;b", "1abc", "a.b.c", ""])
def test_table_names_must_be_plain_identifiers(pg_url, name):
    with pytest.raises(ValueError, match="is not a plain SQL identifier"):
        write_table(frame(1), pg_url, name)


def test_write_table_to_sqlite(tmp_path):
    db = f"sqlite:///{tmp_path / 'out.db'}"
    assert write_table(frame(300), db, "results", mode="create") == 300
    assert write_table(frame(5), db, "results", mode="replace") == 5
    assert pd.read_sql("SELECT count(*) AS n FROM results", db).n[0] == 5


def test_cli_query_and_out(pg_url, runs, cache_root, tmp_path, pg):
    conn, prefix = pg
    cli = os.path.join(os.path.dirname(sys.executable), "dask-staging")
    r = subprocess.run(
        [cli, "query", pg_url, f"SELECT * FROM {runs}", "--root", str(cache_root), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    import json

    path = json.loads(r.stdout)["path"]
    r = subprocess.run(
        [cli, "out", path, pg_url, "--table", f"{prefix}_copy", "--mode", "create"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert count(conn, f"{prefix}_copy") == ROWS
    r = subprocess.run(
        [
            cli,
            "query",
            pg_url.replace("exa-pg-secret", "nope-pw"),
            "SELECT 1",
            "--root",
            str(cache_root),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "password authentication failed" in r.stderr
    assert "nope-pw" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_query_results_share_eviction_pinning_and_single_flight(pg_url, runs, cache_root):
    from concurrent.futures import ThreadPoolExecutor

    cache = Cache(cache_root)
    query = f"SELECT * FROM {runs}"
    with ThreadPoolExecutor(4) as pool:
        paths = set(
            pool.map(
                lambda _: cache.stage_query(pg_url, query, partition_on="id", partitions=2),
                range(4),
            )
        )
    assert len(paths) == 1 and cache.stats()["misses"] == 1  # one export for four callers
    single = cache.stage_query(pg_url, query)
    by_path = {str(cache_root.resolve() / e.path): e for e in cache.entries()}
    partitioned = by_path[paths.pop()]
    cache.pin(partitioned.url)
    assert cache.evict() == by_path[single].size  # the pinned directory stays
    assert not os.path.exists(single) and cache.contains(partitioned.url)
    cache.unpin(partitioned.url)
    assert cache.evict(partitioned.url) == partitioned.size
    assert cache.entries() == [] and not any((cache_root / "data").rglob("*.parquet"))
