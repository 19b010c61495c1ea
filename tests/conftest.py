"""Fixtures for tests against the real services that scripts/services.sh starts."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import urllib.request
import uuid
from pathlib import Path

import pytest
import s3fs

# Airflow reads its home at import time: give the test session its own, before anything imports it.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="exa-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(Path(__file__).parent / "dags"))

MINIO = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")
MINIO_USER = os.environ.get("EXA_MINIO_USER", "exa-minio")
MINIO_PASSWORD = os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret")
TOXIPROXY = os.environ.get("EXA_TOXIPROXY_API", "http://127.0.0.1:8474")
TOXIC_S3_PORT = int(os.environ.get("EXA_TOXIC_S3_PORT", "9100"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except Exception:
        return False


def require(service: str, url: str) -> None:
    """Skip without the service locally; fail in CI, where a missing service is a bug."""
    if _reachable(url):
        return
    message = f"{service} is not running at {url}; start it with scripts/services.sh up"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def minio():
    require("MinIO", f"{MINIO}/minio/health/ready")
    return MINIO


@pytest.fixture
def s3_env(minio, monkeypatch):
    """The standard AWS variables, pointing at MinIO."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MINIO_USER)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MINIO_PASSWORD)
    monkeypatch.setenv("AWS_ENDPOINT_URL", minio)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return minio


@pytest.fixture(scope="session")
def s3(minio):
    return s3fs.S3FileSystem(
        key=MINIO_USER, secret=MINIO_PASSWORD, endpoint_url=minio, skip_instance_cache=True
    )


@pytest.fixture
def bucket(s3, s3_env):
    """A fresh, empty bucket for one test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    s3.mkdir(name)
    yield name
    with contextlib.suppress(Exception):
        s3.rm(name, recursive=True)


@pytest.fixture
def put(s3, bucket):
    """put(key, data) uploads bytes and returns the object's s3:// URL."""

    def _put(key: str, data: bytes) -> str:
        s3.pipe(f"{bucket}/{key}", data)
        return f"s3://{bucket}/{key}"

    return _put


def minio_get_count() -> int:
    """GetObject requests MinIO has served so far (its live v3 metrics)."""
    with urllib.request.urlopen(f"{MINIO}/minio/metrics/v3/api/requests", timeout=5) as r:
        text = r.read().decode()
    match = re.search(r'^minio_api_requests_total\{name="GetObject"[^}]*\} (\S+)$', text, re.M)
    return int(float(match.group(1))) if match else 0


@pytest.fixture
def get_count(minio):
    return minio_get_count


PG_URL = os.environ.get("EXA_PG_URL", "postgresql://postgres:exa-pg-secret@127.0.0.1:5433/postgres")


def _pg_ready() -> bool:
    import psycopg2

    try:
        psycopg2.connect(PG_URL, connect_timeout=2).close()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_url():
    """The throwaway PostgreSQL 15 cluster that scripts/services.sh starts."""
    if not _pg_ready():
        message = "PostgreSQL is not running; start it with scripts/services.sh up"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return PG_URL


@pytest.fixture
def pg(pg_url):
    """A psycopg2 connection in autocommit mode, and a unique table-name prefix."""
    import psycopg2

    conn = psycopg2.connect(pg_url)
    conn.autocommit = True
    prefix = f"t_{uuid.uuid4().hex[:8]}"
    yield conn, prefix
    with conn.cursor() as cur:
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname='public' AND tablename LIKE %s",
            (prefix + "%",),
        )
        for (name,) in cur.fetchall():
            cur.execute(f'DROP TABLE IF EXISTS "{name}"')
    conn.close()


@pytest.fixture
def cache_root(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def toxiproxy(minio):
    """A toxiproxy proxy in front of MinIO; yields (endpoint, api helper) and removes it after."""
    require("toxiproxy", f"{TOXIPROXY}/version")
    import json

    name = f"s3-{uuid.uuid4().hex[:8]}"

    def api(method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{TOXIPROXY}{path}", data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    upstream = MINIO.split("://", 1)[1]
    for other in (api("GET", "/proxies") or {}).values():  # e.g. left by a benchmark
        if other["listen"].endswith(f":{TOXIC_S3_PORT}"):
            api("DELETE", f"/proxies/{other['name']}")
    api(
        "POST",
        "/proxies",
        {
            "name": name,
            "listen": f"127.0.0.1:{TOXIC_S3_PORT}",
            "upstream": upstream,
            "enabled": True,
        },
    )

    class Proxy:
        endpoint = f"http://127.0.0.1:{TOXIC_S3_PORT}"

        def add(self, toxic: str, attributes: dict, stream: str = "downstream", **extra):
            body = {"type": toxic, "stream": stream, "attributes": attributes, **extra}
            return api("POST", f"/proxies/{name}/toxics", body)

        def remove(self, toxic_name: str):
            api("DELETE", f"/proxies/{name}/toxics/{toxic_name}")

        def enable(self, enabled: bool):
            """Bring the link down (open connections are cut) or up again."""
            api("POST", f"/proxies/{name}", {"enabled": enabled})

    yield Proxy()
    api("DELETE", f"/proxies/{name}")


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MiB tmpfs, to fill the disk under a cache for real."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True
    )
    if result.returncode != 0:
        message = f"cannot mount a tmpfs here: {result.stderr.decode().strip()}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata database (SQLite in the session's AIRFLOW_HOME)."""
    import sys

    airflow = str(Path(sys.executable).with_name("airflow"))
    result = subprocess.run([airflow, "db", "migrate"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return os.environ["AIRFLOW_HOME"]


SSH = {
    "host": os.environ.get("EXA_SSH_HOST", "127.0.0.1"),
    "port": int(os.environ.get("EXA_SSH_PORT", "2222")),
    "user": os.environ.get("EXA_SSH_USER", "root"),
    "key": os.environ.get("EXA_SSH_KEY", ""),
    "known_hosts": os.environ.get("EXA_SSH_KNOWN_HOSTS", ""),
}


@pytest.fixture(scope="session")
def login_node():
    """sshd on 127.0.0.1:2222 (the login node) in front of the single-node Slurm."""
    import socket

    try:
        socket.create_connection((SSH["host"], SSH["port"]), timeout=2).close()
        ok = bool(SSH["key"]) and os.path.exists(SSH["key"])
    except OSError:
        ok = False
    if not ok:
        message = "sshd/Slurm are not running; start them with scripts/services.sh up"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return SSH


@pytest.fixture
def slurm_conn(login_node, monkeypatch):
    """An Airflow ``slurm`` connection (id ``slurm_test``) to the login node, via env var."""
    import json

    conn = {
        "conn_type": "slurm",
        "host": login_node["host"],
        "port": login_node["port"],
        "login": login_node["user"],
        "extra": {"key_file": login_node["key"], "known_hosts": login_node["known_hosts"]},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_TEST", json.dumps(conn))
    return "slurm_test"


@pytest.fixture
def aws_conn(s3_env, monkeypatch):
    """An ``aws`` connection (id ``exa_s3_test``) to MinIO; the AWS_* variables are unset."""
    monkeypatch.setenv("AIRFLOW_CONN_EXA_S3_TEST", minio_aws_conn(s3_env))
    # the remote side must get credentials from the connection, not from this environment
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    return "exa_s3_test"


def minio_aws_conn(endpoint: str) -> str:
    """An Airflow ``aws`` connection (JSON, for ``AIRFLOW_CONN_*``) to the test MinIO."""
    import json

    return json.dumps(
        {
            "conn_type": "aws",
            "login": MINIO_USER,
            "password": MINIO_PASSWORD,
            "extra": {"endpoint_url": endpoint},
        }
    )
