"""A DAG whose Dask task runs on an ephemeral SLURMCluster (dask-jobqueue)."""

from __future__ import annotations

import json
import os

import pendulum
from airflow.sdk import dag

from airflow_exa_provider.operators.dask import DaskOperator
from dask_staging.plugin import worker_stats


def describe_cluster(client, result_file: str) -> dict:
    """Which Slurm jobs the workers run in, and what their staging caches hold."""
    summary = {
        "jobs": sorted(client.run(os.getenv, "SLURM_JOB_ID").values()),
        "caches": list(worker_stats(client).values()),
        "total": client.submit(sum, range(10)).result(),
    }
    with open(result_file, "w") as f:
        json.dump(summary, f)
    return summary


@dag(
    dag_id="exa_test_dask_slurm",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
)
def dask_slurm():
    DaskOperator(
        task_id="on_slurm",
        python_callable=describe_cluster,
        op_kwargs={"result_file": os.environ.get("EXA_TEST_RESULT", "/tmp/exa-dask-slurm.json")},
        cluster="slurm",
        n_workers=2,
        staging_root=os.environ.get("EXA_TEST_STAGING_ROOT", "/tmp/exa-dask-slurm-cache"),
        cluster_options={
            "scheduler_options": {"host": "127.0.0.1"},
            "worker_extra_args": ["--host", "127.0.0.1"],
            "memory": "1GB",
        },
    )


dask_slurm()
