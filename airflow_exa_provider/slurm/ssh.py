"""Slurm over SSH to a login node, with the OpenSSH client.

One ``ControlMaster`` connection per login node (keyed by host, port and user)
carries every command: submit, the batched status query of each poll, log
reads and cancels.  Host keys are checked against a known_hosts file by
default; a key that does not match is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass

from airflow_exa_provider.slurm import commands
from airflow_exa_provider.slurm.commands import JobState, SlurmError


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to log in."""

    host: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None
    check_host_key: bool = True
    connect_timeout: int = 10

    def describe(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


def control_path(target: SSHTarget) -> str:
    """Socket of the shared connection to ``target`` (short enough for AF_UNIX).

    Every setting is part of the key: a connection with another key file or
    known_hosts must never ride on a master that was authenticated differently.
    """
    digest = hashlib.sha256(repr(target).encode()).hexdigest()[:20]
    base = os.path.join(tempfile.gettempdir(), f"exa-ssh-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return os.path.join(base, digest)


def ssh_argv(target: SSHTarget, remote: list[str]) -> list[str]:
    """The ``ssh`` command line that runs ``remote`` (quoted) on ``target``."""
    argv = [
        "ssh",
        "-p",
        str(target.port),
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={target.connect_timeout}",
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={control_path(target)}",
        "-o",
        "ControlPersist=300",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        f"StrictHostKeyChecking={'yes' if target.check_host_key else 'no'}",
    ]
    if target.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={target.known_hosts}"]
    if target.key_file:
        argv += ["-i", target.key_file, "-o", "IdentitiesOnly=yes"]
    argv.append(f"{target.user}@{target.host}" if target.user else target.host)
    return [*argv, "--", shlex.join(remote) if len(remote) > 1 else remote[0]]


def _failure(target: SSHTarget, what: str, code: int, stderr: str) -> SlurmError:
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("Warning:")]
    reason = lines[-1] if lines else f"exit status {code}"
    if code == 255:
        return SlurmError(f"ssh to {target.describe()} failed: {reason}")
    return SlurmError(f"{what} on {target.describe()} failed (exit {code}): {reason}")


class SSHBackend:
    """Submit, query, cancel and read logs of Slurm jobs through one SSH connection."""

    def __init__(self, target: SSHTarget):
        self.target = target

    # -- the one place that runs commands -------------------------------------------

    def run(self, remote: list[str], *, stdin: str | None = None, what: str = "command") -> str:
        proc = subprocess.run(
            ssh_argv(self.target, remote),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=self.target.connect_timeout + 120,
        )
        if proc.returncode != 0:
            raise _failure(self.target, what, proc.returncode, proc.stderr)
        return proc.stdout

    async def arun(self, remote: list[str], *, what: str = "command") -> str:
        proc = await asyncio.create_subprocess_exec(
            *ssh_argv(self.target, remote),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise _failure(self.target, what, proc.returncode, err.decode(errors="replace"))
        return out.decode(errors="replace")

    # -- Slurm --------------------------------------------------------------------

    def submit(self, script: str, options: dict | None = None) -> str:
        args = commands.sbatch_args(options)
        return commands.parse_sbatch(self.run(args, stdin=script, what="sbatch"))

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        out = self.run(["sh", "-c", commands.status_script(job_ids)], what="job status")
        return commands.parse_status(out, job_ids)

    async def astates(self, job_ids: list[str]) -> dict[str, JobState]:
        out = await self.arun(["sh", "-c", commands.status_script(job_ids)], what="job status")
        return commands.parse_status(out, job_ids)

    def cancel(self, job_id: str) -> None:
        self.run(commands.scancel_args(job_id), what="scancel")

    async def acancel(self, job_id: str) -> None:
        await self.arun(commands.scancel_args(job_id), what="scancel")

    def read_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        out = self.run(
            [
                "sh",
                "-c",
                shlex.join(commands.read_from_args(path, offset)) + " 2>/dev/null || true",
            ],
            what="reading the log",
        )
        return out, offset + len(out.encode())

    async def aread_log(self, path: str, offset: int = 0) -> tuple[str, int]:
        remote = shlex.join(commands.read_from_args(path, offset)) + " 2>/dev/null || true"
        out = await self.arun(["sh", "-c", remote], what="reading the log")
        return out, offset + len(out.encode())
