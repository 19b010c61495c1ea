"""SlurmJobTrigger: watch a Slurm job from the triggerer and stream its log.

All triggers in one triggerer process that watch jobs on the same login node
share one :class:`JobWatcher`: a single batched status query per poll
interval, over the one SSH connection per login node that the backend keeps.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_exa_provider.hooks.slurm import SlurmHook
from airflow_exa_provider.slurm.commands import JobState, SlurmError
from airflow_exa_provider.slurm.ssh import SSHBackend


class JobWatcher:
    """Batches the status queries of every job watched on one login node."""

    _watchers: ClassVar[dict[tuple, JobWatcher]] = {}

    def __init__(self, backend: SSHBackend, interval: float):
        self.backend = backend
        self.interval = interval
        self.waiting: dict[str, list[asyncio.Future]] = {}
        self.polls = 0
        self._task: asyncio.Task | None = None

    @classmethod
    def for_backend(cls, backend: SSHBackend, interval: float) -> JobWatcher:
        key = (backend.target, interval, id(asyncio.get_running_loop()))
        watcher = cls._watchers.get(key)
        if watcher is None:
            watcher = cls._watchers[key] = cls(backend, interval)
        return watcher

    async def next_state(self, job_id: str) -> JobState:
        """The job's state from the next batched poll."""
        future = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(job_id, []).append(future)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._poll())
        return await future

    async def _poll(self) -> None:
        while self.waiting:
            await asyncio.sleep(0)  # let every trigger of this round register first
            waiting, self.waiting = self.waiting, {}
            try:
                states = await self.backend.astates(list(waiting))
                self.polls += 1
            except Exception as exc:
                for futures in waiting.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
            else:
                for job_id, futures in waiting.items():
                    for future in futures:
                        if not future.done():
                            future.set_result(states[job_id])
            await asyncio.sleep(self.interval)


class SlurmJobTrigger(BaseTrigger):
    """Watch a Slurm job from the triggerer; log its output as it grows; fire when it ends.

    New lines of the job's output file go to the trigger's log, which Airflow
    shows inside the task's log, so the task is not woken for every chunk.

    Parameters
    ----------
    job_id : str
    slurm_conn_id : str
    poll_interval : float
        Seconds between status queries (shared by all jobs on the login node).
    log_path : str, optional
        The job's stdout file on the cluster, read from ``log_offset`` on.
    max_failures : int
        Consecutive connection failures tolerated (with jittered backoff)
        before the task fails; a restarted slurmctld or a dropped connection
        only delays the next event.
    min_wait : float
        Seconds after deferring before the end is reported.  A task resumed
        before the scheduler has handled its deferral is failed by Airflow as
        "changed externally"; a few seconds keep quick jobs clear of that race.
    """

    def __init__(
        self,
        job_id: str,
        slurm_conn_id: str = SlurmHook.default_conn_name,
        poll_interval: float = 5.0,
        log_path: str | None = None,
        log_offset: int = 0,
        max_failures: int = 20,
        min_wait: float = 5.0,
    ):
        super().__init__()
        self.job_id = str(job_id)
        self.slurm_conn_id = slurm_conn_id
        self.poll_interval = poll_interval
        self.log_path = log_path
        self.log_offset = log_offset
        self.max_failures = max_failures
        self.min_wait = min_wait

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_exa_provider.triggers.slurm.SlurmJobTrigger",
            {
                "job_id": self.job_id,
                "slurm_conn_id": self.slurm_conn_id,
                "poll_interval": self.poll_interval,
                "log_path": self.log_path,
                "log_offset": self.log_offset,
                "max_failures": self.max_failures,
                "min_wait": self.min_wait,
            },
        )

    async def on_kill(self) -> None:
        """Cancel the Slurm job when a user kills the deferred task (e.g. marks it failed)."""
        backend = await SlurmHook(self.slurm_conn_id).abackend()
        await backend.acancel(self.job_id)
        self.log.info("cancelled Slurm job %s", self.job_id)

    def _log_lines(self, text: str) -> None:
        for line in text.splitlines():
            self.log.info("[slurm %s] %s", self.job_id, line)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        try:
            backend = await SlurmHook(self.slurm_conn_id).abackend()
        except Exception as exc:
            yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(exc)})
            return
        watcher = JobWatcher.for_backend(backend, self.poll_interval)
        failures, offset, partial = 0, self.log_offset, ""
        while True:
            try:
                state = await watcher.next_state(self.job_id)
                log_path = self.log_path or state.stdout
                if log_path and state.state not in ("PENDING", "UNKNOWN"):
                    chunk, offset = await backend.aread_log(log_path, offset)
                    text = partial + chunk
                    complete, _, partial = text.rpartition("\n")
                    self._log_lines(complete)
            except Exception as exc:  # SlurmError, or anything else: retry, then report it
                failures += 1
                message = str(exc) if isinstance(exc, SlurmError) else repr(exc)
                if failures > self.max_failures:
                    yield TriggerEvent(
                        {"status": "error", "job_id": self.job_id, "message": message}
                    )
                    return
                self.log.warning("Slurm unreachable (%s); retrying", message)
                await asyncio.sleep(min(60.0, self.poll_interval * 2**failures) * random.random())
                continue
            failures = 0
            if state.finished:
                self._log_lines(partial)
                await asyncio.sleep(max(0.0, self.min_wait - (time.monotonic() - started)))
                yield TriggerEvent(
                    {
                        "status": "finished",
                        "job_id": self.job_id,
                        "state": state.state,
                        "exit_code": state.exit_code,
                        "signal": state.signal,
                        "log": "",
                        "log_path": log_path,
                        "log_offset": offset,
                    }
                )
                return
