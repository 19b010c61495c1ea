"""exa_pipeline end to end with dag.test(): MinIO, PostgreSQL, Slurm over SSH, Dask, Assets."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import MINIO_PASSWORD, minio_aws_conn


@pytest.fixture
def pipeline_env(s3, s3_env, pg, pg_url, slurm_conn, monkeypatch, tmp_path):
    """Sample data in MinIO and PostgreSQL, and the connections the DAGs use."""
    conn, _ = pg
    bucket = f"pipeline-{uuid.uuid4().hex[:8]}"
    s3.mkdir(bucket)
    rng = np.random.default_rng(1)
    for i in range(2):
        frame = pd.DataFrame(
            {"station": rng.integers(0, 20, 5000), "temperature": rng.normal(10, 5, 5000)}
        )
        with s3.open(f"{bucket}/weather/part-{i:02d}.parquet", "wb") as f:
            frame.to_parquet(f)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS stations; DROP TABLE IF EXISTS station_means")
        cur.execute(
            "CREATE TABLE stations AS SELECT g AS station, 'station-' || g AS name "
            "FROM generate_series(0, 19) g"
        )
    monkeypatch.setenv("AIRFLOW_CONN_EXA_S3", minio_aws_conn(s3_env))
    monkeypatch.setenv("AIRFLOW_CONN_EXA_PG", pg_url.replace("postgresql://", "postgres://"))
    monkeypatch.setenv("AIRFLOW_CONN_EXA_SLURM", os.environ["AIRFLOW_CONN_SLURM_TEST"])
    monkeypatch.setenv("EXA_PIPELINE_BUCKET", bucket)
    monkeypatch.setenv("EXA_PIPELINE_ROOT", str(tmp_path / "cache"))
    monkeypatch.setenv("EXA_PIPELINE_PARTS", "2")
    yield bucket
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS stations; DROP TABLE IF EXISTS station_means")


def test_exa_pipeline_and_the_asset_scheduled_report(pipeline_env, airflow_db, s3, pg, capfd):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors, bag.import_errors
    pipeline = bag.get_dag("exa_pipeline")
    run = pipeline.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert set(states.values()) == {"success"}, states
    assert set(states) == {
        "stage_in",
        "compute_dask",
        "compute_slurm",
        "stage_out_s3",
        "stage_out_pg",
    }
    bucket = pipeline_env
    assert s3.exists(f"{bucket}/results/dask/station_means.parquet")
    assert s3.exists(f"{bucket}/results/slurm/station_means.parquet")
    conn, _ = pg
    with conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT name) FROM station_means")
        assert cur.fetchone() == (20, 20)
    from airflow.sdk import Asset

    results = Asset(f"s3://{bucket}/results/").uri
    outlets = {o.uri for o in pipeline.get_task("stage_out_s3").outlets}
    assert outlets == {results}
    report = bag.get_dag("exa_report")
    assert [a.uri for a in report.timetable.asset_condition.objects] == [results]
    report_run = report.test()
    [ti] = report_run.get_task_instances()
    assert ti.state == "success"
    out, err = capfd.readouterr()  # everything the tasks logged
    assert "dag_id=exa_pipeline" in out + err  # the run was logged here
    xcoms = [
        json.dumps(ti.xcom_pull(task_ids=ti.task_id), default=str)
        for r in (run, report_run)
        for ti in r.get_task_instances()
    ]
    assert any("station_means" in x or ".parquet" in x for x in xcoms)
    logs = [p.read_text(errors="replace") for p in Path(os.environ["AIRFLOW_HOME"]).rglob("*.log")]
    for secret in (MINIO_PASSWORD, "exa-pg-secret"):
        assert secret not in out + err
        assert not any(secret in x for x in xcoms), "a secret in XCom"
        assert not any(secret in text for text in logs), "a secret in a log file"
