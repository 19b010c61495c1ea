"""``dask-staging bench``: real measurements against MinIO, PostgreSQL and local directories,
the advice computed from them, the budget, bad input, and runs where the data lands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg2
import pytest

from dask_staging.bench import Measurement, advise, on_workers
from dask_staging.bench.budget import Budget
from tests.conftest import MINIO_PASSWORD

CLI = [sys.executable, "-m", "dask_staging.cli"]
SMALL = ["--sizes", "1MiB,4MiB", "--streams", "1,4", "--small-objects", "20", "--small-size",
         "64KiB", "--db-rows", "20000", "--fs-size", "8MiB"]  # fmt: skip


def bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "bench", *args], capture_output=True, text=True, timeout=300, env=env
    )


def bench_tables(pg_url: str) -> list[str]:
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'dask_staging_bench%'")
        return [row[0] for row in cur.fetchall()]


def test_measures_every_tier_advises_and_leaves_nothing_behind(
    s3_env, s3, bucket, pg_url, tmp_path
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = bench(
        "--root", str(tmp_path / "root"), "--fs", str(scratch), "--s3", f"s3://{bucket}/tmp",
        "--db", pg_url, *SMALL, "--dataset-size", "10GiB", "--reads", "3",
        "--out", str(out), "--plot", str(png),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())
    seen = {
        (m["tier"], m["op"], m["method"], m["streams"], m["object_size"])
        for m in results["measurements"]
    }
    for size in (1 << 20, 4 << 20):
        for streams in (1, 4):
            assert ("s3", "read", "ranged GET", streams, size) in seen
            assert ("s3", "write", "multipart PUT", streams, size) in seen
    methods = {(m["tier"], m["method"]) for m in results["measurements"]}
    assert {("db", "COPY TO binary"), ("db", "SELECT (server-side cursor)"),
            ("db", "stage_query → Parquet"), ("db", "COPY FROM binary"),
            ("s3", "GET, many objects"), ("s3", "PUT, many objects")} <= methods  # fmt: skip
    fs_targets = {m["target"] for m in results["measurements"] if m["tier"] == "fs"}
    assert fs_targets == {str(tmp_path / "root"), str(scratch)}
    small = [m for m in results["measurements"] if m["method"] == "GET, many objects"]
    assert small[0]["objects"] == 20 and small[0]["objects_per_s"] > 0
    assert all(m["mb_per_s"] > 0 and m["seconds"] > 0 for m in results["measurements"])
    assert not results["skipped"]
    # the table, the advice and the plot
    assert "ranged GET" in result.stdout and "COPY TO binary" in result.stdout
    assert "S3: " in result.stdout and "database: " in result.stdout
    assert {a["source"] for a in results["advice"]["sources"]} == {"S3", "database"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # nothing left: objects, tables, files
    assert s3.ls(f"{bucket}/tmp") == [] if s3.exists(f"{bucket}/tmp") else True
    assert bench_tables(pg_url) == []
    assert list(scratch.iterdir()) == []
    assert MINIO_PASSWORD not in result.stdout + result.stderr + out.read_text()


def test_budget_stops_new_measurements_and_says_what_it_skipped(tmp_path):
    result = bench("--root", str(tmp_path), "--fs-size", "8MiB", "--max-bytes", "4MiB", "--json")
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout)
    assert results["measurements"] == []
    assert results["skipped"] == [{"what": f"write {tmp_path}", "reason": "byte budget spent"}]
    budget = Budget(0, 1 << 40)
    assert (
        budget.measure("late", lambda: None, tier="fs", target="x", op="read", method="m", bytes=1)
        is None
    )
    assert budget.skipped == [{"what": "late", "reason": "time budget spent"}]


def m(tier, op, method, mb_per_s, streams=1, size=1 << 30, target="t"):
    return Measurement(tier, target, op, method, bytes=int(mb_per_s * 1e6), seconds=1.0,
                       streams=streams, object_size=size)  # fmt: skip


def test_advice_from_rates():
    rows = [
        m("fs", "read", "sequential read", 2000, target="/local"),
        m("fs", "read", "sequential read", 9000, target="/dev/shm"),
        m("s3", "read", "ranged GET", 100, streams=1),
        m("s3", "read", "ranged GET", 1000, streams=16),
        m("s3", "read", "ranged GET", 5000, streams=16, size=1 << 20),  # smaller objects: ignored
        m("db", "read", "SELECT (server-side cursor)", 50),
        m("db", "read", "stage_query → Parquet", 40),
    ]
    s3, db = advise(rows, dataset_bytes=10**10, reads=1, local="/local")
    assert s3.source == "S3" and s3.stage  # 100 s direct vs 10 + 5 s staged
    assert s3.direct_seconds == pytest.approx(100) and s3.staged_seconds == pytest.approx(15)
    assert s3.local_mb_per_s == 2000 and s3.break_even_reads == pytest.approx(0.001 / 0.0095)
    assert db.source == "database" and not db.stage  # 200 s direct vs 250 + 5 s staged
    assert db.direct_seconds == pytest.approx(200) and db.staged_seconds == pytest.approx(255)
    [_, db3] = advise(rows, dataset_bytes=10**10, reads=3, local="/local")
    assert db3.stage  # 600 s direct vs 250 + 15 s
    assert "pays off from read 2 on" in db3.text(10**10, 3)
    with pytest.raises(ValueError, match="file system read rate"):
        advise(rows[2:], 10**10, 1)
    with pytest.raises(ValueError, match="must be positive"):
        advise(rows, 0, 1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--s3", "bucket/tmp"], "--s3 must be an s3://bucket/prefix URL"),
        (["--db", "sqlite:////tmp/x.db"], "--db must be a PostgreSQL URL"),
        (["--streams", "0,4"], "stream counts must be positive"),
        (["--sizes", "big"], "not a size"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    result = bench("--root", str(tmp_path), "--fs-size", "1MiB", *args)
    assert result.returncode != 0 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_wrong_database_password_never_shows(pg_url, tmp_path):
    wrong = pg_url.replace("exa-pg-secret", "not-the-password-1234")
    result = bench("--root", str(tmp_path), "--fs-size", "1MiB", "--db", wrong)  # progress on
    assert result.returncode == 1 and "password authentication failed" in result.stderr
    assert "not-the-password-1234" not in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("run_on", ["ssh", "slurm"])
def test_bench_runs_where_the_data_lands(run_on, aws_conn, slurm_conn, bucket, pg_url, tmp_path):
    from airflow_exa_provider.hooks.staging import StagingHook

    cli = str(os.path.join(os.path.dirname(sys.executable), "dask-staging"))
    hook = StagingHook(str(tmp_path / "node"), run_on=run_on, aws_conn_id=aws_conn,
                       slurm_conn_id=slurm_conn, remote_cli=cli)  # fmt: skip
    results = hook.bench(
        s3_prefix=f"s3://{bucket}/tmp", db=pg_url, dataset_size=1 << 30, reads=2,
        sizes=[1 << 20], streams=[1, 2], small_objects=5, small_size=4096, db_rows=1000,
        fs_size=1 << 20,
    )  # fmt: skip
    tiers = {m["tier"] for m in results["measurements"]}
    assert tiers == {"fs", "s3", "db"}
    assert (results["slurm_job"] is not None) == (run_on == "slurm")
    assert len(results["advice"]["sources"]) == 2
    assert bench_tables(pg_url) == []


def test_bench_on_every_dask_worker_host(tmp_path):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    with cluster, Client(cluster) as client:
        results = on_workers(client, root=str(tmp_path / "w"), fs_size=1 << 20)
        everywhere = on_workers(
            client, one_per_host=False, root=str(tmp_path / "w"), fs_size=1 << 20
        )
    assert len(results) == 1  # both workers share one host
    assert len(everywhere) == 2
    [only] = results.values()
    assert {(m["tier"], m["op"]) for m in only["measurements"]} == {("fs", "write"), ("fs", "read")}


def test_staging_bench_operator_in_a_dag_on_a_compute_node(
    aws_conn, slurm_conn, bucket, airflow_db, tmp_path, monkeypatch
):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("EXA_TEST_BENCH_ROOT", str(tmp_path / "node"))
    monkeypatch.setenv("EXA_TEST_BENCH_PREFIX", f"s3://{bucket}/bench")
    bag = DagBag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors
    run = bag.get_dag("exa_test_bench").test()
    [ti] = run.get_task_instances()
    assert ti.state == "success"
    results = ti.xcom_pull(task_ids="bench")
    assert results["slurm_job"] and {m["tier"] for m in results["measurements"]} == {"fs", "s3"}
    assert results["advice"]["sources"][0]["source"] == "S3"
