"""SlurmJobOperator: run a batch job on a Slurm cluster and follow it to the end."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from airflow_exa_provider.deferral import resolve_deferrable
from airflow_exa_provider.hooks.slurm import SlurmHook
from airflow_exa_provider.slurm.commands import JobState
from airflow_exa_provider.triggers.slurm import SlurmJobTrigger

XCOM_JOB_ID = "slurm_job_id"


class SlurmJobFailed(RuntimeError):
    """The Slurm job did not complete successfully."""


class SlurmJobOperator(BaseOperator):
    """Submit a Slurm batch job, stream its log into the task log, fail if it fails.

    Parameters
    ----------
    command : str, optional
        Shell command(s) to run (wrapped in a bash script with ``set -euo pipefail``).
    script : str, optional
        A complete batch script instead of ``command``.
    sbatch_options : dict, optional
        ``{"time": "00:10:00", "cpus_per_task": 4, ...}`` passed as ``--time=...``.
    slurm_conn_id : str
    poll_interval : float
    deferrable : bool, optional
        Wait in the triggerer instead of a worker slot.  By default: when
        ``[operators] default_deferrable`` is set, or when the API server
        reports a healthy triggerer; otherwise the job is followed from the
        worker.
    """

    template_fields: Sequence[str] = ("command", "script", "sbatch_options")
    ui_color = "#c7e9c0"

    def __init__(
        self,
        *,
        command: str | None = None,
        script: str | None = None,
        sbatch_options: dict | None = None,
        slurm_conn_id: str = SlurmHook.default_conn_name,
        poll_interval: float = 5.0,
        deferrable: bool | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.command = command
        self.script = script
        self.sbatch_options = sbatch_options or {}
        self.slurm_conn_id = slurm_conn_id
        self.poll_interval = poll_interval
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> SlurmHook:
        """One hook per task run: ``on_kill`` reuses its open SSH connection to cancel fast."""
        return SlurmHook(self.slurm_conn_id)

    def execute(self, context) -> str:
        job_id = self.hook.submit(
            command=self.command, script=self.script, options=self.sbatch_options
        )
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=job_id)
        self._job_id = job_id
        if resolve_deferrable(self.deferrable):
            self.defer(
                trigger=SlurmJobTrigger(job_id, self.slurm_conn_id, self.poll_interval),
                method_name="execute_complete",
            )
        return self._follow(job_id)

    def _follow(self, job_id: str) -> str:
        """Wait in this process, printing new log output as it arrives."""
        hook, offset = self.hook, 0
        while True:
            state = hook.state(job_id)
            if state.stdout and state.state not in ("PENDING", "UNKNOWN"):
                chunk, offset = hook.read_log(state.stdout, offset)
                self._log_chunk(job_id, chunk)
            if state.finished:
                return self._finish(job_id, state, state.stdout)
            time.sleep(self.poll_interval)

    def execute_complete(self, context, event: dict) -> str:
        job_id = self._job_id = event["job_id"]
        if event["status"] == "error":
            raise SlurmJobFailed(f"watching Slurm job {job_id} failed: {event['message']}")
        self._log_chunk(job_id, event.get("log", ""))
        if event["status"] == "running":  # more log to come: wait again from the new offset
            self.defer(
                trigger=SlurmJobTrigger(
                    job_id,
                    self.slurm_conn_id,
                    self.poll_interval,
                    log_path=event.get("log_path"),
                    log_offset=event["log_offset"],
                ),
                method_name="execute_complete",
            )
        state = JobState(job_id, event["state"], event["exit_code"], signal=event.get("signal"))
        return self._finish(job_id, state, event.get("log_path"))

    def _log_chunk(self, job_id: str, chunk: str) -> None:
        for line in chunk.splitlines():
            self.log.info("[slurm %s] %s", job_id, line)

    def _finish(self, job_id: str, state: JobState, log_path: str | None):
        if state.succeeded:
            self.log.info("Slurm job %s completed", job_id)
            return job_id
        tail = ""
        if log_path:
            text, _ = self.hook.read_log(log_path, 0)
            tail = " | ".join(text.strip().splitlines()[-5:])
        raise SlurmJobFailed(
            f"Slurm job {job_id} ended {state.describe()}"
            + (f"; last log lines: {tail}" if tail else "")
        )

    def on_kill(self) -> None:
        """Cancel the Slurm job when Airflow kills the task."""
        job_id = getattr(self, "_job_id", None)
        if job_id:
            self.hook.cancel(job_id)
