"""The public names of ../shared/CONTRACT.md import and have the agreed signatures."""

from __future__ import annotations

import inspect


def test_dask_staging_names():
    from dask_staging import Cache, StagingPlugin, stage_out, write_table

    params = inspect.signature(Cache).parameters
    assert list(params)[:4] == ["root", "max_bytes", "streams", "index_url"]
    assert params["streams"].default == 8 and params["max_bytes"].default is None
    for method in (
        "get",
        "stage",
        "contains",
        "entries",
        "pin",
        "unpin",
        "evict",
        "verify",
        "stats",
        "stage_query",
    ):
        assert callable(getattr(Cache, method))
    assert inspect.signature(stage_out).parameters["streams"].default == 8
    write = inspect.signature(write_table).parameters
    assert (write["mode"].default, write["writers"].default) == ("append", 4)
    assert StagingPlugin.name == "dask-staging" and StagingPlugin.idempotent


def test_provider_names():
    from airflow_exa_provider.hooks.dask import DaskHook
    from airflow_exa_provider.hooks.slurm import SlurmHook
    from airflow_exa_provider.hooks.staging import StagingHook
    from airflow_exa_provider.operators.dask import DaskOperator
    from airflow_exa_provider.operators.slurm import SlurmJobOperator
    from airflow_exa_provider.operators.staging import StageInOperator, StageOutOperator
    from airflow_exa_provider.sensors.slurm import SlurmJobSensor
    from airflow_exa_provider.sensors.staging import StagedDataSensor
    from airflow_exa_provider.triggers.slurm import SlurmJobTrigger

    assert SlurmHook.conn_type == "slurm" and DaskHook.conn_type == "dask"
    assert all(
        [
            StagingHook,
            DaskOperator,
            SlurmJobOperator,
            StageInOperator,
            StageOutOperator,
            SlurmJobSensor,
            StagedDataSensor,
            SlurmJobTrigger,
        ]
    )


def test_entry_points():
    from importlib.metadata import entry_points

    [staged] = entry_points(group="fsspec.specs", name="staged")
    assert staged.value == "dask_staging.fs:StagedFileSystem"
    ours = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.value.startswith("airflow_exa_provider.")
    ]
    assert [e.value for e in ours] == ["airflow_exa_provider.get_provider_info:get_provider_info"]
    assert ours[0].load()()["package-name"] == "airflow-exa-provider"
    [cli] = entry_points(group="console_scripts", name="dask-staging")
    assert cli.value == "dask_staging.cli:main"
