"""Slurm over slurmrestd (OpenAPI v0.0.38) with a JWT.

One HTTP client (one keep-alive connection) per backend; every poll is one
``GET /jobs`` for all watched jobs.  slurmrestd has no file API, so job logs
are read over SSH when the connection names a login node as well, or else
from a file system the cluster shares with the Airflow worker
(:class:`SharedFileLogs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

from airflow_exa_provider.slurm.commands import JobState, SlurmError

_TIME = re.compile(r"^(?:(\d+)-)?(\d+):(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class RESTTarget:
    url: str
    user: str
    api_version: str = "v0.0.38"

    def describe(self) -> str:
        return self.url


def minutes(value: str) -> int:
    """Slurm time (``MM``, ``HH:MM:SS``, ``D-HH:MM:SS``) in whole minutes."""
    text = str(value)
    if text.isdigit():
        return int(text)
    match = _TIME.match(text)
    if not match:
        raise ValueError(f"{value!r} is not a Slurm time limit")
    days, first, second, third = match.groups()
    hours, mins, secs = (
        (int(first), int(second), int(third)) if third else (0, int(first), int(second))
    )
    return int(days or 0) * 1440 + hours * 60 + mins + (1 if secs else 0)


def job_description(options: dict | None) -> dict:
    """The ``job`` object of a submit request from sbatch-style options."""
    job: dict = {
        "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        "current_working_directory": "/tmp",
    }
    names = {
        "job_name": "name",
        "output": "standard_output",
        "error": "standard_error",
        "partition": "partition",
        "chdir": "current_working_directory",
        "account": "account",
        "qos": "qos",
        "nodes": "nodes",
        "ntasks": "tasks",
        "cpus_per_task": "cpus_per_task",
    }
    for key, value in (options or {}).items():
        key = key.replace("-", "_")
        if key == "time":
            job["time_limit"] = minutes(value)
        elif key in names:
            job[names[key]] = value
        else:
            raise ValueError(f"sbatch option {key!r} is not supported over slurmrestd")
    return job


def parse_job(job: dict) -> JobState:
    state = job.get("job_state") or "UNKNOWN"
    raw = job.get("exit_code")  # a wait(2) status
    exit_code = signal = None
    if isinstance(raw, int):
        exit_code, signal = (raw >> 8) & 0xFF, (raw & 0x7F) or None
    job_id = str(job.get("job_id"))
    stdout = job.get("standard_output")
    if stdout:
        stdout = stdout.replace("%j", job_id).replace("%A", job_id)
    return JobState(job_id, state, exit_code, stdout, job.get("state_reason"), signal)


class SharedFileLogs:
    """Read job logs from a file system shared with the cluster (home, scratch)."""

    def read_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return "", offset
        except OSError as exc:
            raise SlurmError(f"cannot read the job log {path}: {exc.strerror}") from None
        for cut in range(min(4, len(data)) + 1):  # never split a UTF-8 character
            try:
                text = data[: len(data) - cut].decode()
            except UnicodeDecodeError:
                continue
            return text, offset + len(data) - cut
        return data.decode(errors="replace"), offset + len(data)

    async def aread_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        return self.read_log(path, offset)


class RESTBackend:
    """Submit, query and cancel jobs through slurmrestd.

    ``logs`` reads job logs: an SSH backend to a login node, or by default
    :class:`SharedFileLogs`.
    """

    def __init__(self, target: RESTTarget, token: str, timeout: float = 30.0, logs=None):
        self.target = target
        self.logs = logs or SharedFileLogs()
        self._headers = {"X-SLURM-USER-NAME": target.user, "X-SLURM-USER-TOKEN": token}
        self._timeout = timeout
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    def _path(self, path: str) -> str:
        return f"{self.target.url.rstrip('/')}/slurm/{self.target.api_version}{path}"

    def _check(self, response: httpx.Response, what: str) -> dict:
        try:
            body = response.json()
        except ValueError:
            body = {}
        errors = [e.get("error") or e.get("description") for e in body.get("errors", []) if e]
        if response.status_code >= 400 or errors:
            reason = "; ".join(str(e) for e in errors if e) or f"HTTP {response.status_code}"
            if response.status_code in (401, 403) or (response.status_code == 500 and not errors):
                reason += " (is the JWT token valid for this user?)"
            raise SlurmError(f"{what} via slurmrestd at {self.target.url} failed: {reason}")
        return body

    def _request(self, method: str, path: str, what: str, **kwargs) -> dict:
        if self._client is None:
            self._client = httpx.Client(headers=self._headers, timeout=self._timeout)
        try:
            response = self._client.request(method, self._path(path), **kwargs)
        except httpx.HTTPError as exc:
            raise SlurmError(f"{what} via slurmrestd at {self.target.url} failed: {exc}") from None
        return self._check(response, what)

    async def _arequest(self, method: str, path: str, what: str) -> dict:
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(headers=self._headers, timeout=self._timeout)
        try:
            response = await self._aclient.request(method, self._path(path))
        except httpx.HTTPError as exc:
            raise SlurmError(f"{what} via slurmrestd at {self.target.url} failed: {exc}") from None
        return self._check(response, what)

    def submit(self, script: str, options: dict | None = None) -> str:
        body = {"script": script, "job": job_description(options)}
        result = self._request("POST", "/job/submit", "sbatch", json=body)
        return str(result["job_id"])

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return self._collect(self._request("GET", "/jobs", "job status"), job_ids)

    async def astates(self, job_ids: list[str]) -> dict[str, JobState]:
        return self._collect(await self._arequest("GET", "/jobs", "job status"), job_ids)

    @staticmethod
    def _collect(body: dict, job_ids: list[str]) -> dict[str, JobState]:
        wanted = set(map(str, job_ids))
        states = {}
        for job in body.get("jobs", []):
            state = parse_job(job)
            if state.job_id in wanted:
                states[state.job_id] = state
        for job_id in wanted - set(states):
            states[job_id] = JobState(job_id, "UNKNOWN")
        return states

    def cancel(self, job_id: str) -> None:
        self._request("DELETE", f"/job/{int(job_id)}", "scancel")

    async def acancel(self, job_id: str) -> None:
        await self._arequest("DELETE", f"/job/{int(job_id)}", "scancel")

    def read_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        return self.logs.read_log(path, offset)

    async def aread_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        return await self.logs.aread_log(path, offset)
