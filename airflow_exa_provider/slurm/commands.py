"""Pure functions that build Slurm commands and parse their output.

Nothing here talks to a cluster; every argument that reaches a shell goes
through :func:`shlex.quote`, so job names, paths and options can hold any text.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

FINISHED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
}
_OPTION = re.compile(r"^[a-z][a-z0-9-]*$")


class SlurmError(Exception):
    """A Slurm command or the connection to the cluster failed."""


@dataclass(frozen=True)
class JobState:
    """What Slurm says about one job."""

    job_id: str
    state: str
    exit_code: int | None = None
    stdout: str | None = None
    reason: str | None = None
    signal: int | None = None  # the signal that ended the job, if one did

    def describe(self) -> str:
        """``FAILED (exit code 3)``, ``FAILED (killed by signal 9)``, ``TIMEOUT``..."""
        if self.signal:
            return f"{self.state} (killed by signal {self.signal})"
        if self.exit_code:
            return f"{self.state} (exit code {self.exit_code})"
        return self.state

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and (self.exit_code or 0) == 0


def render_script(command: str | None = None, script: str | None = None) -> str:
    """A batch script from a shell ``command`` or a full ``script``."""
    if bool(command) == bool(script):
        raise ValueError("give exactly one of command= or script=")
    if script:
        return script if script.startswith("#!") else "#!/bin/bash\n" + script
    return f"#!/bin/bash\nset -euo pipefail\n{command}\n"


def sbatch_args(options: dict[str, object] | None = None) -> list[str]:
    """``sbatch --parsable --opt=value ...``; option names are checked, values passed as-is."""
    args = ["sbatch", "--parsable"]
    for name, value in (options or {}).items():
        flag = name.replace("_", "-")
        if not _OPTION.match(flag):
            raise ValueError(f"{name!r} is not an sbatch option name")
        if value is True:
            args.append(f"--{flag}")
        elif value not in (None, False):
            args.append(f"--{flag}={value}")
    return args


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``)."""
    text = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = text.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch did not return a job id: {stdout.strip()[:200]!r}")
    return job_id


ACTIVE = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
}
_SQUEUE_FORMAT = "JobID:|,State:|,Reason:|,STDOUT:"


def status_script(job_ids: list[str]) -> str:
    """One shell snippet that reports every job in one round trip.

    ``squeue`` answers for all queued and running jobs in a single call to the
    controller; only jobs it does not show as active are asked of ``scontrol``
    (exit codes of recently finished jobs), then of ``sacct`` when the
    controller has forgotten them (works without slurmdbd via jobcomp).
    """
    for job_id in job_ids:
        if not str(job_id).isdigit():
            raise ValueError(f"{job_id!r} is not a Slurm job id")
    ids = " ".join(shlex.quote(str(j)) for j in job_ids)
    active = "|".join(sorted(ACTIVE))
    return (
        f"sq=$(squeue -h -t all -j {','.join(map(str, job_ids))} "
        f"-O {shlex.quote(_SQUEUE_FORMAT)} 2>/dev/null); "
        'printf "%s\\n" "$sq" | sed -n "s/^./SQUEUE|&/p"; '
        f"for j in {ids}; do "
        f'printf "%s\\n" "$sq" | grep -Eq "^$j\\|({active})\\|" && continue; '
        'out=$(scontrol show job -o "$j" 2>/dev/null) && echo "$out" || '
        '{ echo "SACCT $j"; sacct -c -n -P -o JobID,State,ExitCode -j "$j" 2>/dev/null '
        '|| sacct -n -P -X -o JobID,State,ExitCode -j "$j" 2>/dev/null; }; '
        "done"
    )


def parse_status(output: str, job_ids: list[str]) -> dict[str, JobState]:
    """States from :func:`status_script` output; unknown jobs are ``UNKNOWN``.

    ``scontrol`` and ``sacct`` lines (which carry exit codes) take precedence
    over ``squeue`` lines for the same job.
    """
    states: dict[str, JobState] = {}
    queued: dict[str, JobState] = {}
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("SQUEUE|"):
            job_id, state, reason, stdout = [*line.split("|")[1:], "", "", ""][:4]
            queued[job_id] = JobState(
                job_id, state or "UNKNOWN", None, stdout or None, reason or None
            )
        elif line.startswith("JobId="):
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            job_id = fields.get("JobId", "")
            states[job_id] = JobState(
                job_id=job_id,
                state=fields.get("JobState", "UNKNOWN"),
                exit_code=_exit_code(fields.get("ExitCode")),
                stdout=fields.get("StdOut"),
                reason=fields.get("Reason"),
                signal=_signal(fields.get("ExitCode")),
            )
        elif "|" in line:
            job_id, state, exit_code = [*line.split("|"), "", ""][:3]
            job_id = job_id.split(".", 1)[0]
            if job_id in job_ids and job_id not in states:
                states[job_id] = JobState(
                    job_id,
                    state.split()[0] if state else "UNKNOWN",
                    _exit_code(exit_code),
                    signal=_signal(exit_code),
                )
    for job_id in job_ids:
        states.setdefault(job_id, queued.get(job_id) or JobState(job_id, "UNKNOWN"))
    return {job_id: states[job_id] for job_id in job_ids}


def _exit_code(text: str | None) -> int | None:
    if not text:
        return None
    code = text.split(":", 1)[0]
    return int(code) if code.lstrip("-").isdigit() else None


def _signal(text: str | None) -> int | None:
    """The signal of Slurm's ``exit:signal`` pair, if non-zero."""
    if not text or ":" not in text:
        return None
    sig = text.split(":", 1)[1]
    return int(sig) if sig.isdigit() and int(sig) else None


def scancel_args(job_id: str) -> list[str]:
    if not str(job_id).isdigit():
        raise ValueError(f"{job_id!r} is not a Slurm job id")
    return ["scancel", str(job_id)]


def read_from_args(path: str, offset: int) -> list[str]:
    """Bytes of ``path`` from byte ``offset`` on (``tail -c +N``; empty if missing)."""
    return ["tail", "-c", f"+{int(offset) + 1}", path]
