"""SlurmJobSensor: wait for a Slurm job submitted elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_exa_provider.deferral import resolve_deferrable
from airflow_exa_provider.hooks.slurm import SlurmHook
from airflow_exa_provider.operators.slurm import SlurmJobFailed
from airflow_exa_provider.slurm.commands import JobState
from airflow_exa_provider.triggers.slurm import SlurmJobTrigger


class SlurmJobSensor(BaseSensorOperator):
    """Succeed when ``job_id`` completes; fail when it ends any other way."""

    template_fields: Sequence[str] = ("job_id",)

    def __init__(
        self,
        *,
        job_id: str,
        slurm_conn_id: str = SlurmHook.default_conn_name,
        deferrable: bool | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.job_id = job_id
        self.slurm_conn_id = slurm_conn_id
        self.deferrable = deferrable

    def execute(self, context) -> None:
        if resolve_deferrable(self.deferrable) and not self.poke(context):
            self.defer(
                trigger=SlurmJobTrigger(self.job_id, self.slurm_conn_id, self.poke_interval),
                method_name="execute_complete",
            )
        super().execute(context)

    def poke(self, context) -> bool:
        state = SlurmHook(self.slurm_conn_id).state(str(self.job_id))
        if state.finished and not state.succeeded:
            raise SlurmJobFailed(f"Slurm job {self.job_id} ended {state.describe()}")
        return state.finished

    def execute_complete(self, context, event: dict) -> None:
        if event["status"] == "error":
            raise SlurmJobFailed(event["message"])
        if event["status"] == "running":
            self.defer(
                trigger=SlurmJobTrigger(
                    self.job_id,
                    self.slurm_conn_id,
                    self.poke_interval,
                    log_offset=event["log_offset"],
                ),
                method_name="execute_complete",
            )
        state = JobState(
            self.job_id, event["state"], event["exit_code"], signal=event.get("signal")
        )
        if not state.succeeded:
            raise SlurmJobFailed(f"Slurm job {self.job_id} ended {state.describe()}")
