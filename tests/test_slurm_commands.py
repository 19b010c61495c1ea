"""Pure checks of Slurm command building and output parsing (no cluster needed)."""

from __future__ import annotations

import shlex

import pytest

from airflow_exa_provider.slurm import commands
from airflow_exa_provider.slurm.ssh import SSHTarget, ssh_argv


def test_sbatch_args_quote_nothing_away():
    args = commands.sbatch_args({"job_name": "a b; rm -rf /", "exclusive": True, "mem": None})
    assert args == ["sbatch", "--parsable", "--job-name=a b; rm -rf /", "--exclusive"]
    assert shlex.split(shlex.join(args)) == args  # survives the remote shell intact
    with pytest.raises(ValueError, match="not an sbatch option"):
        commands.sbatch_args({"x; echo pwned": 1})


def test_render_script():
    assert commands.render_script(command="echo hi").startswith("#!/bin/bash\nset -euo pipefail")
    assert commands.render_script(script="#!/bin/sh\necho").startswith("#!/bin/sh")
    with pytest.raises(ValueError, match="exactly one"):
        commands.render_script()


def test_parse_sbatch():
    assert commands.parse_sbatch("1234\n") == "1234"
    assert commands.parse_sbatch("77;cluster-a\n") == "77"
    with pytest.raises(commands.SlurmError, match="did not return a job id"):
        commands.parse_sbatch("sbatch: error: Batch job submission failed")


def test_parse_status_squeue_then_scontrol_then_sacct():
    out = (
        "SQUEUE|4|PENDING|Resources|/home/u/slurm-4.out\n"
        "SQUEUE|5|RUNNING|None|/home/u/slurm-5.out\n"
        "SQUEUE|8|COMPLETED|None|/o\n"
        "SACCT 6\n6|FAILED|3:0\n6.batch|FAILED|3:0\n"
        "SACCT 7\n"
        "JobId=8 JobState=CANCELLED Reason=None ExitCode=0:15 StdOut=/o\n"
        "JobId=9 JobState=RUNNING Reason=None ExitCode=0:0 StdOut=/p\n"
    )
    states = commands.parse_status(out, ["4", "5", "6", "7", "8"])
    assert list(states) == ["4", "5", "6", "7", "8"]  # only the jobs asked about
    assert (states["4"].state, states["4"].reason) == ("PENDING", "Resources")
    assert states["5"].state == "RUNNING" and states["5"].stdout == "/home/u/slurm-5.out"
    assert (states["6"].state, states["6"].exit_code, states["6"].finished) == ("FAILED", 3, True)
    assert states["7"].state == "UNKNOWN" and not states["7"].finished
    # scontrol's answer (with the exit code) wins over squeue's for a finished job
    assert states["8"].state == "CANCELLED" and states["8"].finished and not states["8"].succeeded


def test_status_script_batches_and_validates_ids():
    script = commands.status_script(["1", "22", "333"])
    assert script.count("squeue") == 1 and "-j 1,22,333" in script
    assert "for j in 1 22 333;" in script and script.count("scontrol") == 1
    with pytest.raises(ValueError, match="not a Slurm job id"):
        commands.status_script(["1; reboot"])
    with pytest.raises(ValueError, match="not a Slurm job id"):
        commands.scancel_args("$(reboot)")


def test_ssh_argv_checks_host_keys_and_shares_one_connection():
    target = SSHTarget("login", 2222, "u", "/k", "/kh")
    argv = ssh_argv(target, ["sbatch", "--job-name=a b"])
    assert "StrictHostKeyChecking=yes" in argv and "ControlMaster=auto" in argv
    assert argv[-1] == "sbatch '--job-name=a b'"
    assert ssh_argv(target, ["x"])[argv.index("-o") + 7] == argv[argv.index("-o") + 7]
    loose = ssh_argv(SSHTarget("login", check_host_key=False), ["x"])
    assert "StrictHostKeyChecking=no" in loose


def test_exit_codes_and_signals_are_told_apart():
    out = (
        "JobId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 StdOut=/o\n"
        "JobId=2 JobState=FAILED Reason=JobLaunchFailure ExitCode=0:9 StdOut=/o\n"
        "SACCT 3\n3|CANCELLED by 0|0:15\n"
    )
    states = commands.parse_status(out, ["1", "2", "3"])
    assert states["1"].describe() == "FAILED (exit code 3)"
    assert states["2"].describe() == "FAILED (killed by signal 9)" and not states["2"].succeeded
    assert states["3"].describe() == "CANCELLED (killed by signal 15)"
    assert commands.JobState("4", "TIMEOUT").describe() == "TIMEOUT"


def test_rest_exit_codes_are_wait_statuses():
    from airflow_exa_provider.slurm.rest import parse_job

    exited = parse_job({"job_id": 5, "job_state": "FAILED", "exit_code": 4 << 8})
    killed = parse_job({"job_id": 6, "job_state": "FAILED", "exit_code": 9})
    assert (exited.exit_code, exited.signal) == (4, None)
    assert (killed.exit_code, killed.signal) == (0, 9)
