"""A DAG that measures the data paths from a Slurm compute node (StagingBenchOperator)."""

from __future__ import annotations

import os
import sys

import pendulum
from airflow.sdk import dag

from airflow_exa_provider.operators.staging import StagingBenchOperator


@dag(
    dag_id="exa_test_bench",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
)
def bench_on_slurm():
    StagingBenchOperator(
        task_id="bench",
        root=os.environ.get("EXA_TEST_BENCH_ROOT", "/tmp/exa-bench-node"),
        run_on="slurm",
        slurm_conn_id="slurm_test",
        aws_conn_id="exa_s3_test",
        s3_prefix=os.environ.get("EXA_TEST_BENCH_PREFIX"),
        remote_cli=os.path.join(os.path.dirname(sys.executable), "dask-staging"),
        dataset_size=10 << 30,
        reads=2,
        bench_options={
            "sizes": [1 << 20],
            "streams": [1, 2],
            "small_objects": 4,
            "fs_size": 1 << 20,
            "max_seconds": 60,
        },
    )


bench_on_slurm()
