"""SlurmHook: submit, watch, cancel and read the logs of Slurm jobs, over SSH or slurmrestd."""

from __future__ import annotations

import os
import stat
import tempfile
from functools import cached_property

from airflow.sdk import BaseHook

from airflow_exa_provider.slurm.commands import JobState, SlurmError, render_script
from airflow_exa_provider.slurm.rest import RESTBackend, RESTTarget
from airflow_exa_provider.slurm.ssh import SSHBackend, SSHTarget


def _private_file(prefix: str, content: str) -> str:
    fd, path = tempfile.mkstemp(prefix=prefix)
    with os.fdopen(fd, "w") as f:
        f.write(content if content.endswith("\n") else content + "\n")
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    return path


class SlurmHook(BaseHook):
    """Access a Slurm cluster through a ``slurm`` connection.

    SSH (default): host/port/login of the login node; ``extra`` holds
    ``key_file`` or ``private_key``, and ``known_hosts`` or ``host_key``.
    Host keys are checked unless ``check_host_key`` is false.  REST: ``extra``
    has ``rest_url`` (and ``api_version``); the password is the JWT.  Job logs
    then come over SSH when ``host`` is set too (``extra.ssh_login`` names the
    SSH user if it differs from the Slurm user), else from a shared file system.
    """

    conn_name_attr = "slurm_conn_id"
    default_conn_name = "slurm_default"
    conn_type = "slurm"
    hook_name = "Slurm"

    def __init__(self, slurm_conn_id: str = default_conn_name, **kwargs):
        super().__init__(**kwargs)
        self.slurm_conn_id = slurm_conn_id

    @property
    def target(self):
        """Where the jobs run (an SSH login node or a slurmrestd URL)."""
        return self.backend.target

    def target_from(self, conn, user: str | None = None) -> SSHTarget:
        extra = conn.extra_dejson
        key_file = extra.get("key_file")
        if extra.get("private_key"):
            key_file = _private_file("exa-slurm-key-", extra["private_key"])
        known_hosts = extra.get("known_hosts")
        if extra.get("host_key"):
            host = conn.host if not conn.port or conn.port == 22 else f"[{conn.host}]:{conn.port}"
            known_hosts = _private_file("exa-known-hosts-", f"{host} {extra['host_key']}")
        check = str(extra.get("check_host_key", True)).lower() not in ("false", "0", "no")
        if not conn.host:
            raise SlurmError(f"connection {self.slurm_conn_id!r} names no login node (host)")
        return SSHTarget(
            host=conn.host,
            port=int(conn.port or 22),
            user=user or conn.login or None,
            key_file=key_file,
            known_hosts=known_hosts,
            check_host_key=check,
        )

    @cached_property
    def backend(self) -> SSHBackend | RESTBackend:
        return self.backend_from(self.get_connection(self.slurm_conn_id))

    async def abackend(self) -> SSHBackend | RESTBackend:
        """:attr:`backend`, for use inside a trigger's event loop."""
        return self.backend_from(await self.aget_connection(self.slurm_conn_id))

    def backend_from(self, conn) -> SSHBackend | RESTBackend:
        extra = conn.extra_dejson
        if extra.get("rest_url"):
            if not conn.password:
                raise SlurmError(f"connection {self.slurm_conn_id!r} has a rest_url but no JWT")
            target = RESTTarget(
                extra["rest_url"], conn.login or "root", extra.get("api_version") or "v0.0.38"
            )
            logs = None
            if conn.host:
                logs = SSHBackend(self.target_from(conn, user=extra.get("ssh_login")))
            return RESTBackend(target, conn.password, logs=logs)
        return SSHBackend(self.target_from(conn))

    def submit(
        self,
        *,
        command: str | None = None,
        script: str | None = None,
        options: dict | None = None,
    ) -> str:
        """Submit a batch job; returns its id."""
        job_id = self.backend.submit(render_script(command, script), options)
        self.log.info("submitted Slurm job %s on %s", job_id, self.target.describe())
        return job_id

    def state(self, job_id: str) -> JobState:
        return self.backend.states([job_id])[job_id]

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return self.backend.states(job_ids)

    def cancel(self, job_id: str) -> None:
        self.backend.cancel(job_id)
        self.log.info("cancelled Slurm job %s", job_id)

    def read_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        return self.backend.read_log(path, offset)
