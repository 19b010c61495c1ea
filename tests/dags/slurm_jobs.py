"""DAGs that the Slurm tests run with dag.test() (connection ``slurm_test`` from the env)."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_exa_provider.operators.slurm import SlurmJobOperator
from airflow_exa_provider.sensors.slurm import SlurmJobSensor

START = pendulum.datetime(2026, 1, 1, tz="UTC")


@dag(dag_id="exa_test_slurm_ok", schedule=None, start_date=START, catchup=False)
def slurm_ok():
    job = SlurmJobOperator(
        task_id="waits_in_worker",
        command="echo 'line one'; sleep 1; echo line two",
        sbatch_options={"job_name": "exa ok", "output": "/tmp/exa-test-%j.out"},
        slurm_conn_id="slurm_test",
        poll_interval=0.5,
        deferrable=False,
    )
    deferred = SlurmJobOperator(
        task_id="deferred",
        command="for i in 1 2 3; do echo tick $i; sleep 1; done",
        sbatch_options={"output": "/tmp/exa-test-%j.out"},
        slurm_conn_id="slurm_test",
        poll_interval=0.5,
        deferrable=True,
    )
    watch = SlurmJobSensor(
        task_id="sensor",
        job_id="{{ ti.xcom_pull(task_ids='deferred', key='slurm_job_id') }}",
        slurm_conn_id="slurm_test",
        poke_interval=0.5,
        deferrable=True,
    )
    job >> deferred >> watch


@dag(dag_id="exa_test_slurm_fails", schedule=None, start_date=START, catchup=False)
def slurm_fails():
    SlurmJobOperator(
        task_id="exits_7",
        command="echo about to fail; exit 7",
        sbatch_options={"output": "/tmp/exa-test-%j.out"},
        slurm_conn_id="slurm_test",
        poll_interval=0.5,
        deferrable=True,
        retries=0,
    )


@dag(dag_id="exa_test_slurm_kill", schedule=None, start_date=START, catchup=False)
def slurm_kill():
    """A long job followed from the worker, for killing the task from Airflow."""
    SlurmJobOperator(
        task_id="long",
        command="sleep 600",
        sbatch_options={"job_name": "exa kill me", "output": "/tmp/exa-test-%j.out"},
        slurm_conn_id="slurm_test",
        poll_interval=0.5,
        deferrable=False,
    )


@dag(dag_id="exa_test_slurm_kill_deferred", schedule=None, start_date=START, catchup=False)
def slurm_kill_deferred():
    """A long job followed from the triggerer, for killing the deferred task from Airflow."""
    SlurmJobOperator(
        task_id="long_deferred",
        command="sleep 600",
        sbatch_options={"job_name": "exa kill me too", "output": "/tmp/exa-test-%j.out"},
        slurm_conn_id="slurm_test",
        poll_interval=0.5,
        deferrable=True,
    )


slurm_ok()
slurm_fails()
slurm_kill()
slurm_kill_deferred()


@dag(dag_id="exa_test_slurm_auto", schedule=None, start_date=START, catchup=False)
def slurm_auto():
    """Deferrable left unset: defers only if the API server reports a triggerer."""
    job = SlurmJobOperator(
        task_id="job",
        command="for i in 1 2 3; do echo tick $i; sleep 1; done",
        sbatch_options={"job_name": "exa auto", "output": "/tmp/exa-test-%j.out"},
        slurm_conn_id="slurm_test",
        poll_interval=0.5,
    )
    sensor = SlurmJobSensor(
        task_id="sensor",
        job_id="{{ ti.xcom_pull(task_ids='job', key='slurm_job_id') }}",
        slurm_conn_id="slurm_test",
        poke_interval=0.5,
    )
    job >> sensor


slurm_auto()
