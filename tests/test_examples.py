"""The examples run as users run them: on a LocalCluster, and on Slurm through dask-jobqueue."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI

EXAMPLE = Path(__file__).parent.parent / "examples" / "analytics.py"


def run_example(*args: str, env: dict) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def check_output(out: str) -> None:
    passes = re.findall(r"pass: 20 station means in [\d.]+ s, (\d+) bytes staged from S3", out)
    first, second = (int(x) for x in passes)
    assert first > 0 and second == 0  # the second pass reads only the node's cache
    assert "station-" in out  # joined with the staged SQL query
    assert int(re.search(r"bytes staged from S3 by all workers: (\d+)", out).group(1)) > 0


def test_analytics_on_a_local_cluster(s3_env, tmp_path):
    env = dict(os.environ, EXAMPLE_BUCKET="example-local", TMPDIR=str(tmp_path))
    check_output(run_example("--workers", "2", env=env))


@pytest.fixture
def slurm():
    if shutil.which("sbatch") is None or not os.environ.get("SLURM_CONF"):
        message = "Slurm is not running; start it with scripts/services.sh up"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    ready = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    if "idle" not in ready.stdout and "mixed" not in ready.stdout:
        pytest.fail(f"Slurm has no usable node: {ready.stdout or ready.stderr}")


def test_analytics_on_slurm_with_dask_jobqueue(s3_env, slurm, tmp_path):
    env = dict(os.environ, EXAMPLE_BUCKET="example-slurm", TMPDIR=str(tmp_path))
    out = run_example("--slurm", "--workers", "2", env=env)
    check_output(out)
    nodes = list(tmp_path.glob("dask-staging-example-*"))
    assert [p.name for p in nodes] == ["dask-staging-example-localhost"]  # $SLURMD_NODENAME


def test_demo_seeds_the_pipeline_inputs_for_a_real_deployment(minio, s3, tmp_path):
    import sqlite3

    from tests.conftest import minio_aws_conn

    db = tmp_path / "seed.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AIRFLOW_CONN_SEED_S3"] = minio_aws_conn(minio)
    out = subprocess.run(
        [sys.executable, "-m", "airflow_exa_provider.demo", "--seed-only", "--bucket",
         "exa-seed-test", "--db-url", f"sqlite:///{db}", "--parts", "2",
         "--aws-conn-id", "seed_s3"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(s3.ls("exa-seed-test/weather")) == [
        "exa-seed-test/weather/part-00.parquet",
        "exa-seed-test/weather/part-01.parquet",
    ]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*), min(name) FROM stations").fetchone() == (
            30,
            "station-00",
        )
    missing = subprocess.run(
        [sys.executable, "-m", "airflow_exa_provider.demo", "--seed-only"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (
        missing.returncode != 0 and "--seed-only needs --db-url or --db-conn-id" in missing.stderr
    )
