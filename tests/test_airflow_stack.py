"""The provider under a real Airflow: scheduler, triggerer, DAG processor and API server.

``airflow standalone`` runs on a fresh SQLite metadata DB; a DAG is triggered
through the REST API, its Slurm job defers to the real triggerer (because the
API server reports one), its log is read back through the API, and nothing
the run produced contains the connection's secrets.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from airflow_exa_provider.deferral import health_url, triggerer_available, triggerer_healthy

DAGS = Path(__file__).parent / "dags"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_triggerer_healthy_reads_the_health_payload():
    assert triggerer_healthy({"triggerer": {"status": "healthy"}})
    assert not triggerer_healthy({"triggerer": {"status": "unhealthy"}})
    assert not triggerer_healthy({"triggerer": None})  # never had a triggerer
    assert not triggerer_healthy({})
    assert health_url("http://a:8080/") == "http://a:8080/api/v2/monitor/health"
    assert not triggerer_available(f"http://127.0.0.1:{free_port()}", timeout=1)


@pytest.fixture(scope="module")
def airflow_stack(login_node, tmp_path_factory):
    """``airflow standalone`` with a ``slurm_test`` connection holding an inline key."""
    home = tmp_path_factory.mktemp("airflow-stack")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(DAGS / "slurm_jobs.py", dags / "slurm_jobs.py")
    key = Path(login_node["key"]).read_text()
    conn = {
        "conn_type": "slurm",
        "host": login_node["host"],
        "port": login_node["port"],
        "login": login_node["user"],
        "extra": {"private_key": key, "known_hosts": login_node["known_hosts"]},
    }
    api = f"http://127.0.0.1:{free_port()}"
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__PORT": api.rsplit(":", 1)[1],
        "AIRFLOW__API__BASE_URL": api,
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW_CONN_SLURM_TEST": json.dumps(conn),
    }
    env.pop("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", None)
    with open(home / "standalone.log", "wb") as log:
        proc = subprocess.Popen(
            [str(Path(bin_dir) / "airflow"), "standalone"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not triggerer_available(api, timeout=1):
            assert proc.poll() is None, (home / "standalone.log").read_text()[-3000:]
            time.sleep(1)
        assert triggerer_available(api), "airflow standalone did not report a healthy triggerer"
        yield {"api": api, "home": home, "key": key}
    finally:
        # a failed test must not leave its long jobs holding the cluster's CPUs
        for name in ("exa kill me", "exa kill me too", "exa auto"):
            subprocess.run(["scancel", "--name", name], capture_output=True)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def why(events: list[dict], stack: dict) -> str:
    """The task's own log and the tail of the scheduler's, for a failure message."""
    lines = [f"{e.get('event')} {e.get('error_detail', '')}" for e in events]
    standalone = (Path(stack["home"]) / "standalone.log").read_text()[-4000:]
    return "\n".join(lines[-80:]) + "\n--- airflow standalone ---\n" + standalone


def wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def test_slurm_job_defers_to_the_real_triggerer_and_streams_its_log(airflow_stack):
    api = httpx.Client(base_url=airflow_stack["api"] + "/api/v2", timeout=30)
    dag_id = "exa_test_slurm_auto"
    wait_for(lambda: api.get(f"/dags/{dag_id}").status_code == 200, 120, "the DAG to be parsed")
    assert api.patch(f"/dags/{dag_id}", json={"is_paused": False}).status_code == 200
    run = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None}).json()
    run_url = f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}"

    def finished():
        state = api.get(run_url).json()["state"]
        return state if state in ("success", "failed") else None

    state = wait_for(finished, 240, "the DAG run")
    tis = {ti["task_id"]: ti for ti in api.get(f"{run_url}/taskInstances").json()["task_instances"]}
    log_url = f"{run_url}/taskInstances/job/logs/{tis['job']['try_number']}"
    events = api.get(log_url, params={"full_content": True}).json()["content"]
    job_log = "\n".join(json.dumps(event) for event in events)
    if state != "success":  # say why: the task's own log and the scheduler's
        events_text = "\n".join(str(e.get("event")) + " " + str(e.get("error_detail", ""))
                                 for e in events)  # fmt: skip
        standalone = (Path(airflow_stack["home"]) / "standalone.log").read_text()[-3000:]
        raise AssertionError(f"{tis}\n{events_text[-6000:]}\n--- standalone ---\n{standalone}")
    # the task handed its wait to the triggerer, whose log chunks reached the task log
    print(
        "\n".join(
            e["event"] for e in events if "defer" in str(e).lower() or "trigger" in str(e).lower()
        )
    )
    assert "deferred" in job_log.lower() or "trigger" in job_log.lower(), job_log[-2000:]
    for i in (1, 2, 3):
        assert f"tick {i}" in job_log
    # nothing the run wrote anywhere contains the private key
    secret_lines = [line for line in airflow_stack["key"].splitlines() if len(line) > 40]
    produced = [p for p in Path(airflow_stack["home"]).rglob("*") if p.is_file()]
    produced = [p for p in produced if p.suffix not in (".db", ".db-wal", ".db-shm")]
    assert produced
    for path in produced:
        text = path.read_text(errors="replace")
        assert not any(line in text for line in secret_lines), f"key material in {path}"


@pytest.mark.parametrize(
    "dag_id, task",
    [("exa_test_slurm_kill", "long"), ("exa_test_slurm_kill_deferred", "long_deferred")],
)
def test_killing_the_task_in_airflow_cancels_the_slurm_job(airflow_stack, slurm_conn, dag_id, task):
    from airflow_exa_provider.hooks.slurm import SlurmHook

    api = httpx.Client(base_url=airflow_stack["api"] + "/api/v2", timeout=30)
    wait_for(lambda: api.get(f"/dags/{dag_id}").status_code == 200, 120, "the DAG to be parsed")
    assert api.patch(f"/dags/{dag_id}", json={"is_paused": False}).status_code == 200
    run = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None}).json()
    ti_url = f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/{task}"

    def job_id():
        response = api.get(f"{ti_url}/xcomEntries/slurm_job_id")
        return response.json()["value"] if response.status_code == 200 else None

    job = str(wait_for(job_id, 120, "the job id in XCom")).strip('"')
    hook = SlurmHook(slurm_conn)
    wait_for(lambda: hook.state(job).state == "RUNNING", 60, "the job to run")
    if task == "long_deferred":  # and the triggerer runs its trigger (else no on_kill to call)
        wait_for(lambda: api.get(ti_url).json()["state"] == "deferred", 60, "the task to defer")
        log_url = f"{ti_url}/logs/{api.get(ti_url).json()['try_number']}"

        def trigger_started():
            events = api.get(log_url, params={"full_content": True}).json()["content"]
            return any("starting" in str(e.get("event")) for e in events)

        wait_for(trigger_started, 60, "the triggerer to start the trigger")
    # what "Mark as failed" in the UI does: the worker's supervisor kills the task, or the
    # triggerer calls the trigger's on_kill
    response = api.patch(ti_url, json={"new_state": "failed"})
    assert response.status_code == 200, response.text
    try:
        state = wait_for(lambda: (s := hook.state(job)).finished and s, 90, "the cancellation")
    except AssertionError:
        log_url = f"{ti_url}/logs/{api.get(ti_url).json()['try_number']}"
        events = api.get(log_url, params={"full_content": True}).json()["content"]
        raise AssertionError(f"job {job} was not cancelled\n{why(events, airflow_stack)}") from None
    assert state.state == "CANCELLED"
    assert api.get(ti_url).json()["state"] == "failed"
