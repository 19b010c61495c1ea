"""Slurm through the provider against real sshd + slurmctld/slurmd, and DAGs under dag.test()."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest

from airflow_exa_provider.hooks.slurm import SlurmHook
from airflow_exa_provider.slurm.commands import SlurmError
from airflow_exa_provider.slurm.rest import SharedFileLogs
from airflow_exa_provider.slurm.ssh import SSHBackend
from airflow_exa_provider.triggers.slurm import JobWatcher, SlurmJobTrigger


def wait_done(hook, job_id, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = hook.state(job_id)
        if state.finished:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish")


def test_submit_state_log_and_exit_codes(slurm_conn):
    hook = SlurmHook(slurm_conn)
    job = hook.submit(
        command='echo "it\'s here"; exit 3',
        options={"job_name": "quote ' and ; test", "output": "/tmp/exa-%j.out"},
    )
    state = wait_done(hook, job)
    assert (state.state, state.exit_code) == ("FAILED", 3)
    text, offset = hook.read_log(state.stdout)
    assert text == "it's here\n" and offset == len(text)
    assert hook.read_log(state.stdout, offset) == ("", offset)
    ok = hook.submit(command="true")
    assert wait_done(hook, ok).succeeded


def test_cancel_and_rejected_scripts(slurm_conn):
    hook = SlurmHook(slurm_conn)
    job = hook.submit(command="sleep 120")
    hook.cancel(job)
    assert wait_done(hook, job).state == "CANCELLED"
    with pytest.raises(SlurmError, match=r"sbatch on root@127\.0\.0\.1:2222 failed .*partition"):
        hook.submit(command="true", options={"partition": "no-such-partition"})


def test_host_keys_are_checked(login_node, monkeypatch, tmp_path):
    wrong = tmp_path / "known_hosts"
    wrong.write_text(
        f"[127.0.0.1]:{login_node['port']} ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    )
    conn = {
        "conn_type": "slurm",
        "host": "127.0.0.1",
        "port": login_node["port"],
        "login": login_node["user"],
        "extra": {"key_file": login_node["key"], "known_hosts": str(wrong)},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_BADKEY", json.dumps(conn))
    with pytest.raises(SlurmError, match="Host key verification failed"):
        SlurmHook("slurm_badkey").submit(command="true")


def test_unreachable_login_node_and_unknown_connection(monkeypatch, login_node):
    conn = {
        "conn_type": "slurm",
        "host": "127.0.0.1",
        "port": 1,
        "login": "nobody",
        "extra": {"key_file": login_node["key"]},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_DOWN", json.dumps(conn))
    with pytest.raises(SlurmError, match=r"ssh to nobody@127\.0\.0\.1:1 failed: .*refused"):
        SlurmHook("slurm_down").state("1")
    with pytest.raises(Exception, match="isn't defined"):
        SlurmHook("no_such_connection_xyz").state("1")


def test_trigger_serialization_is_stable():
    trigger = SlurmJobTrigger("42", "slurm_x", poll_interval=2.0, log_path="/o", log_offset=9)
    assert trigger.serialize() == (
        "airflow_exa_provider.triggers.slurm.SlurmJobTrigger",
        {
            "job_id": "42",
            "slurm_conn_id": "slurm_x",
            "poll_interval": 2.0,
            "log_path": "/o",
            "log_offset": 9,
            "max_failures": 20,
            "min_wait": 5.0,
        },
    )


def test_trigger_logs_the_output_as_it_grows_then_fires_once(slurm_conn, capfd):
    hook = SlurmHook(slurm_conn)
    command = "echo first; sleep 2; printf sec; sleep 1; echo ond; printf 'no newline'"
    job = hook.submit(command=command, options={"output": "/tmp/exa-%j.out"})
    trigger = SlurmJobTrigger(job, slurm_conn, poll_interval=0.3, min_wait=0)

    async def first_event():
        return await anext(trigger.run())

    event = asyncio.run(first_event()).payload
    out, err = capfd.readouterr()  # the trigger's log (shown inside the task's log by Airflow)
    lines = [line.split(f"[slurm {job}] ", 1)[1].split(" [")[0].strip()
             for line in (out + err).splitlines() if f"[slurm {job}] " in line]  # fmt: skip
    assert lines == ["first", "second", "no newline"]
    assert event["status"] == "finished" and event["state"] == "COMPLETED"
    assert event["log_offset"] == len("first\nsecond\nno newline")


def accepted_logins() -> int:
    log = os.path.join(os.path.dirname(os.environ.get("EXA_SSH_KEY", "")), "sshd.log")
    with open(log) as f:
        return f.read().count("Accepted publickey")


def test_fifty_deferred_jobs_share_one_connection_and_one_query_per_poll(slurm_conn):
    hook = SlurmHook(slurm_conn)
    jobs = [hook.submit(command="true", options={"mem": "16M"}) for _ in range(50)]
    JobWatcher._watchers.clear()

    async def watch_all():
        triggers = [SlurmJobTrigger(j, slurm_conn, poll_interval=1.0) for j in jobs]
        start_logins = accepted_logins()
        start = time.monotonic()
        events = await asyncio.gather(*(anext(t.run()) for t in triggers))
        watcher = next(iter(JobWatcher._watchers.values()))
        return events, watcher.polls, time.monotonic() - start, accepted_logins() - start_logins

    events, polls, seconds, logins = asyncio.run(watch_all())
    assert all(e.payload["state"] == "COMPLETED" for e in events)
    assert logins <= 1  # the ControlMaster connection is shared by every trigger
    assert polls <= seconds / 1.0 + 2  # one batched status query per interval, not per job


def test_on_kill_cancels_the_slurm_job(slurm_conn):
    from airflow_exa_provider.operators.slurm import SlurmJobOperator

    op = SlurmJobOperator(
        task_id="k",
        command="sleep 300",
        slurm_conn_id=slurm_conn,
        poll_interval=0.3,
        deferrable=False,
    )

    class TI:
        def xcom_push(self, key, value):
            self.job_id = value

    ti = TI()
    errors = []

    def run():
        try:
            op.execute({"ti": ti})
        except Exception as exc:  # the cancelled job fails the task
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not hasattr(ti, "job_id") and time.time() < deadline:
        time.sleep(0.1)
    op.on_kill()
    assert wait_done(SlurmHook(slurm_conn), ti.job_id).state == "CANCELLED"
    thread.join(30)
    assert "CANCELLED" in str(errors[0])


def test_dags_run_with_dag_test(slurm_conn, airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors
    run = bag.get_dag("exa_test_slurm_ok").test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"waits_in_worker": "success", "deferred": "success", "sensor": "success"}
    failed = bag.get_dag("exa_test_slurm_fails").test()
    [ti] = failed.get_task_instances()
    assert ti.state == "failed"


@pytest.fixture
def rest_conn(login_node, monkeypatch):
    """A ``slurm`` connection to slurmrestd with a fresh JWT from ``scontrol token``."""
    import subprocess

    url = os.environ.get("EXA_SLURMRESTD_URL", "http://127.0.0.1:6820")
    out = subprocess.run(
        ["scontrol", "token", "username=root", "lifespan=3600"], capture_output=True, text=True
    )
    if out.returncode != 0:
        pytest.fail(f"cannot get a Slurm JWT: {out.stderr.strip()}")
    token = out.stdout.strip().split("=", 1)[1]
    conn = {
        "conn_type": "slurm",
        "login": "root",
        "password": token,
        "extra": {"rest_url": url, "api_version": "v0.0.38"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_REST", json.dumps(conn))
    return "slurm_rest", token


def test_rest_backend_submit_state_cancel(rest_conn):
    conn_id, _ = rest_conn
    hook = SlurmHook(conn_id)
    job = hook.submit(
        command="echo over rest; exit 4",
        options={"job_name": "rest test", "output": "/tmp/exa-rest-%j.out", "time": "00:05:00"},
    )
    state = wait_done(hook, job)
    assert (state.state, state.exit_code) == ("FAILED", 4)
    assert state.stdout == f"/tmp/exa-rest-{job}.out"
    text, offset = hook.read_log(state.stdout)  # from the shared file system
    assert text == "over rest\n" and offset == len(text)
    long = hook.submit(command="sleep 120")
    hook.cancel(long)
    assert wait_done(hook, long).state == "CANCELLED"
    with pytest.raises(ValueError, match="not supported over slurmrestd"):
        hook.submit(command="true", options={"gres": "gpu:1"})


def test_rest_backend_reads_logs_over_ssh_when_a_login_node_is_named(
    rest_conn, login_node, monkeypatch
):
    conn = json.loads(os.environ["AIRFLOW_CONN_SLURM_REST"])
    conn.update(host=login_node["host"], port=login_node["port"])
    conn["extra"].update(
        ssh_login=login_node["user"],
        key_file=login_node["key"],
        known_hosts=login_node["known_hosts"],
    )
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_RESTSSH", json.dumps(conn))
    hook = SlurmHook("slurm_restssh")
    assert isinstance(hook.backend.logs, SSHBackend)
    job = hook.submit(
        command="printf 'caf\\303\\251 %s\\n' 1 2 3", options={"output": "/tmp/exa-rest-%j.out"}
    )
    state = wait_done(hook, job)
    first, offset = hook.read_log(state.stdout, 0)
    rest, end = hook.read_log(state.stdout, 7)
    assert first == "café 1\ncafé 2\ncafé 3\n" and end == offset == len(first.encode())
    assert rest == first.encode()[7:].decode()


def test_shared_file_logs_never_split_a_character(tmp_path):
    log = tmp_path / "job.out"
    log.write_bytes("né".encode()[:2])  # "n" and half of "é", as a job is writing it
    assert SharedFileLogs().read_log(str(log), 0) == ("n", 1)
    log.write_bytes("né\n".encode())
    assert SharedFileLogs().read_log(str(log), 1) == ("é\n", 4)
    assert SharedFileLogs().read_log(str(tmp_path / "missing.out"), 5) == ("", 5)


def test_rest_backend_in_a_trigger_and_bad_token(rest_conn, monkeypatch):
    conn_id, token = rest_conn
    job = SlurmHook(conn_id).submit(command="sleep 1")

    async def watch():
        return await anext(SlurmJobTrigger(job, conn_id, poll_interval=0.3, min_wait=0).run())

    event = asyncio.run(watch())
    assert event.payload["status"] == "finished" and event.payload["state"] == "COMPLETED"
    bad = json.loads(os.environ["AIRFLOW_CONN_SLURM_REST"])
    bad["password"] = "not-a-valid-jwt-token"
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_BADJWT", json.dumps(bad))
    with pytest.raises(SlurmError, match=r"slurmrestd .* failed") as info:
        SlurmHook("slurm_badjwt").state("1")
    assert "not-a-valid-jwt-token" not in str(info.value) and token not in str(info.value)


def test_trigger_survives_a_slurmctld_restart(slurm_conn):
    import signal
    import subprocess

    conf = os.environ["SLURM_CONF"]
    pid_file = os.path.join(os.path.dirname(conf), "slurmctld.pid")
    hook = SlurmHook(slurm_conn)
    job = hook.submit(command="sleep 4")

    async def watch_through_restart():
        task = asyncio.ensure_future(anext(SlurmJobTrigger(job, slurm_conn, 0.5).run()))
        await asyncio.sleep(1.0)
        with open(pid_file) as f:
            os.kill(int(f.read()), signal.SIGTERM)  # the controller goes away mid-poll
        await asyncio.sleep(2.0)
        assert not task.done()
        subprocess.run(["slurmctld", "-f", conf], check=True)
        return await asyncio.wait_for(task, 60)

    event = asyncio.run(watch_through_restart())
    assert event.payload["state"] == "COMPLETED"
    assert subprocess.run(["scontrol", "ping"], capture_output=True, text=True).returncode == 0
