"""StagingHook where the data must land: here, over SSH on the login node, in a Slurm job."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from airflow_exa_provider.hooks.staging import StagingHook, remote_script
from airflow_exa_provider.operators.staging import StageOutOperator
from airflow_exa_provider.sensors.staging import StagedDataSensor
from dask_staging import Cache
from tests.conftest import MINIO_PASSWORD

CLI = str(Path(sys.executable).with_name("dask-staging"))


def test_remote_scripts_quote_everything():
    script = remote_script(
        {"AWS_SECRET_ACCESS_KEY": "a'b c$(x)"}, ["dask-staging", "stage", "s3://b/k y"]
    )
    assert "export AWS_SECRET_ACCESS_KEY='a'\"'\"'b c$(x)'" in script
    assert script.strip().endswith("dask-staging stage 's3://b/k y'")
    with pytest.raises(ValueError, match="run_on must be one of"):
        StagingHook("/tmp", run_on="cloud")


@pytest.mark.parametrize("run_on", ["local", "ssh", "slurm"])
def test_stage_in_wherever_the_data_must_land(
    run_on, put, aws_conn, slurm_conn, pg_url, runs_table, tmp_path, capsys
):
    url = put(f"hook/{run_on}.bin", b"x" * 4096)
    root = str(tmp_path / f"cache-{run_on}")
    hook = StagingHook(
        root, run_on=run_on, aws_conn_id=aws_conn, slurm_conn_id=slurm_conn, remote_cli=CLI
    )
    paths = hook.stage_in(
        [url], [{"name": "runs", "db_url": pg_url, "sql": f"SELECT * FROM {runs_table}"}]
    )
    assert Path(paths[url]).read_bytes() == b"x" * 4096
    assert len(pd.read_parquet(paths["runs"])) == 5
    cache = Cache(root)
    assert cache.contains(url) and len(cache.entries()) == 2
    assert MINIO_PASSWORD not in capsys.readouterr().out


def test_stage_out_to_s3_and_postgres_over_ssh(
    s3, bucket, aws_conn, slurm_conn, pg_url, pg, tmp_path
):
    _, prefix = pg
    results = tmp_path / "results"
    results.mkdir()
    pd.DataFrame({"a": [1, 2, 3]}).to_parquet(results / "r.parquet")
    hook = StagingHook(
        str(tmp_path), run_on="ssh", aws_conn_id=aws_conn, slurm_conn_id=slurm_conn, remote_cli=CLI
    )
    hook.stage_out(str(results), f"s3://{bucket}/out/")
    assert s3.exists(f"{bucket}/out/r.parquet")
    assert hook.stage_out(
        str(results / "r.parquet"), pg_url, table=f"{prefix}_r", mode="create"
    ) == {"rows": 3, "table": f"{prefix}_r"}
    op = StageOutOperator(task_id="o", source="x", target="exa_pg", table="t")
    assert [a.uri for a in op.outlets] == ["postgres://exa_pg/t"]


def test_staged_data_sensor(put, s3_env, tmp_path):
    url = put("sensor/obj", b"1")
    sensor = StagedDataSensor(task_id="s", urls=[url], root=str(tmp_path / "c"))
    assert sensor.poke({}) is False
    Cache(tmp_path / "c").get(url)
    assert sensor.poke({}) is True


@pytest.fixture
def runs_table(pg):
    conn, prefix = pg
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {prefix}_runs AS SELECT g AS id FROM generate_series(1, 5) g")
    return f"{prefix}_runs"


def test_dask_operator_with_a_dask_connection(monkeypatch, tmp_path):
    from distributed import LocalCluster

    from airflow_exa_provider.operators.dask import DaskOperator

    def count_workers(client, extra):
        return len(client.scheduler_info()["workers"]) + extra

    with LocalCluster(
        n_workers=2, processes=False, protocol="tcp", dashboard_address=":0"
    ) as cluster:
        host, port = cluster.scheduler_address.rsplit(":", 1)
        monkeypatch.setenv(
            "AIRFLOW_CONN_DASK_TEST",
            json.dumps({"conn_type": "dask", "host": host.split("//")[1], "port": int(port)}),
        )
        op = DaskOperator(
            task_id="d",
            python_callable=count_workers,
            op_args=[10],
            dask_conn_id="dask_test",
            staging_root=str(tmp_path / "c"),
        )
        assert op.execute({}) == 12
    assert os.path.isdir(tmp_path / "c")


def test_staged_data_trigger(put, s3_env, tmp_path):
    import asyncio

    from airflow_exa_provider.triggers.staging import StagedDataTrigger

    url = put("sensor/deferred", b"1")
    root = str(tmp_path / "c")
    trigger = StagedDataTrigger([url], root, poll_interval=0.1)
    assert trigger.serialize() == (
        "airflow_exa_provider.triggers.staging.StagedDataTrigger",
        {"urls": [url], "root": root, "index_url": None, "poll_interval": 0.1},
    )

    async def wait_then_stage():
        waiter = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await asyncio.to_thread(lambda: Cache(root).get(url))
        return await asyncio.wait_for(waiter, 10)

    assert asyncio.run(wait_then_stage()).payload == {"status": "success", "urls": [url]}


def test_dask_operator_on_an_ephemeral_slurm_cluster_in_a_dag(
    login_node, airflow_db, tmp_path, monkeypatch
):
    from airflow.dag_processing.dagbag import DagBag

    result = tmp_path / "result.json"
    monkeypatch.setenv("EXA_TEST_RESULT", str(result))
    monkeypatch.setenv("EXA_TEST_STAGING_ROOT", str(tmp_path / "node"))
    bag = DagBag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors
    run = bag.get_dag("exa_test_dask_slurm").test()
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {"on_slurm": "success"}
    summary = json.loads(result.read_text())
    # two workers, each in its own Slurm job, each with the staging plugin loaded
    assert len(summary["jobs"]) == 2 and all(summary["jobs"]) and len(set(summary["jobs"])) == 2
    root = str((tmp_path / "node").resolve())
    assert [c["root"] for c in summary["caches"]] == [root, root] and summary["total"] == 45


def test_database_passwords_travel_in_the_environment_not_on_the_command_line(monkeypatch):
    from airflow_exa_provider.hooks.staging import without_password

    assert without_password("postgresql://u:p%40ss@db:5432/prod") == (
        "postgresql://u@db:5432/prod",
        {"PGPASSWORD": "p@ss"},
    )
    assert without_password("postgresql://u@db/prod") == ("postgresql://u@db/prod", {})
    sent = []
    hook = StagingHook("/tmp/x", run_on="ssh")
    monkeypatch.setattr(
        hook, "_remote", lambda env, argv: sent.append((env, argv)) or '{"path": "p"}'
    )
    hook.stage_in(
        queries=[{"name": "q", "db_url": "postgresql://u:s3cr3t@db/prod", "sql": "SELECT 1"}]
    )
    hook.stage_out("/tmp/r.parquet", "postgresql://u:s3cr3t@db/prod", table="t")
    hook.bench(db="postgresql://u:s3cr3t@db/prod")
    for env, argv in sent:
        assert "s3cr3t" not in " ".join(argv) and env["PGPASSWORD"] == "s3cr3t"
        assert "s3cr3t" in remote_script(env, argv).splitlines()[1]  # the export line, on stdin
