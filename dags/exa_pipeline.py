"""exa_pipeline: stage-in -> compute (Slurm job and Dask) -> stage-out, with Assets.

Stage weather observations (Parquet objects in S3) and a station list (a
PostgreSQL query) into the cluster's cache, compute per-station means twice
(as a Slurm batch job and on a Dask cluster), and stage the results out to S3
and to a PostgreSQL table.  ``exa_report`` runs whenever the S3 results change.

Connections: ``exa_s3`` (aws: login, password, extra.endpoint_url),
``exa_pg`` (postgres) and ``exa_slurm`` (slurm).  Environment:
``EXA_PIPELINE_BUCKET``, ``EXA_PIPELINE_ROOT`` (cache root on the cluster),
``EXA_PIPELINE_SLURM=0`` to skip the Slurm step and ``EXA_PIPELINE_DB_URL``
to use a database URL instead of ``exa_pg`` (``make demo`` does both).
"""

from __future__ import annotations

import os
import sys

import pendulum
from airflow.sdk import Asset, dag, task

from airflow_exa_provider.operators.dask import DaskOperator
from airflow_exa_provider.operators.slurm import SlurmJobOperator
from airflow_exa_provider.operators.staging import StageInOperator, StageOutOperator

BUCKET = os.environ.get("EXA_PIPELINE_BUCKET", "exa-pipeline")
ROOT = os.environ.get("EXA_PIPELINE_ROOT", "/tmp/exa-pipeline-cache")
USE_SLURM = os.environ.get("EXA_PIPELINE_SLURM", "1") == "1"
PARTS = int(os.environ.get("EXA_PIPELINE_PARTS", "4"))
DB_URL = os.environ.get("EXA_PIPELINE_DB_URL")  # instead of the exa_pg connection (make demo)
DB = {"db_url": DB_URL} if DB_URL else {"db_conn_id": "exa_pg"}
RESULTS = Asset(f"s3://{BUCKET}/results/")
SCRIPT = os.path.join(os.path.dirname(os.path.realpath(__file__)), "scripts", "station_means.py")


def station_means_on_dask(client, paths: dict, out: str) -> int:
    """The Dask compute step: the same means, computed by the cluster's workers."""
    import dask.dataframe as dd
    import pandas as pd

    weather = [p for name, p in paths.items() if name != "stations"]
    means = dd.read_parquet(weather).groupby("station").temperature.agg(["mean", "count"])
    summary = means.compute().rename(columns={"count": "readings"}).reset_index()
    summary = summary.merge(pd.read_parquet(paths["stations"]), on="station")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    summary.to_parquet(out, index=False)
    return len(summary)


@dag(
    dag_id="exa_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["exa", "staging"],
)
def exa_pipeline():
    stage_in = StageInOperator(
        task_id="stage_in",
        urls=[f"s3://{BUCKET}/weather/part-{i:02d}.parquet" for i in range(PARTS)],
        queries=[
            {"name": "stations", "sql": "SELECT station, name FROM stations ORDER BY station", **DB}
        ],
        root=ROOT,
        aws_conn_id="exa_s3",
    )
    on_dask = DaskOperator(
        task_id="compute_dask",
        python_callable=station_means_on_dask,
        op_kwargs={
            "paths": "{{ ti.xcom_pull(task_ids='stage_in') }}",
            "out": f"{ROOT}/results/dask/station_means.parquet",
        },
        staging_root=ROOT,
    )
    to_s3 = StageOutOperator(
        task_id="stage_out_s3",
        source=f"{ROOT}/results",
        target=f"s3://{BUCKET}/results/",
        aws_conn_id="exa_s3",
        outlets=[RESULTS],
    )
    to_pg = StageOutOperator(
        task_id="stage_out_pg",
        source=f"{ROOT}/results/dask/station_means.parquet",
        target=DB_URL or "exa_pg",
        table="station_means",
        mode="replace",
    )
    stage_in >> on_dask >> [to_s3, to_pg]
    if USE_SLURM:
        on_slurm = SlurmJobOperator(
            task_id="compute_slurm",
            command=(
                f"mkdir -p {ROOT}/results/slurm && {sys.executable} {SCRIPT} "
                f"{ROOT}/results/slurm/station_means.parquet "
                "{{ ti.xcom_pull(task_ids='stage_in').values() | join(' ') }}"
            ),
            sbatch_options={"job_name": "exa-station-means", "output": f"{ROOT}/slurm-%j.out"},
            slurm_conn_id="exa_slurm",
            poll_interval=1.0,
            deferrable=True,
        )
        stage_in >> on_slurm >> to_s3


@dag(
    dag_id="exa_report",
    schedule=[RESULTS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["exa"],
)
def exa_report():
    @task
    def coldest_stations() -> list[dict]:
        import pandas as pd

        from airflow_exa_provider.hooks.staging import StagingHook, aws_settings
        from dask_staging import Cache

        _, s3 = aws_settings(StagingHook.get_connection("exa_s3"))
        cache = Cache(ROOT, **({"s3": s3} if s3 else {}))
        path = cache.get(f"s3://{BUCKET}/results/dask/station_means.parquet")
        rows = pd.read_parquet(path).nsmallest(3, "mean")[["name", "mean"]]
        return rows.to_dict("records")

    coldest_stations()


exa_pipeline()
exa_report()
