"""Secrets never appear in anything a run produces: CLI output (plain and --json), ``ls``,
error messages, remote staging output.  The pipeline and Airflow-stack tests check task logs,
log files and XCom the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import MINIO_PASSWORD, MINIO_USER

CLI = [sys.executable, "-m", "dask_staging.cli"]
PG_SECRET = "exa-pg-secret"


def run(*args: str, env: dict) -> str:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300)
    return out.stdout + out.stderr


def test_nothing_the_cli_prints_holds_a_secret(put, bucket, pg_url, tmp_path):
    put("data/a.bin", b"a" * 1000)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=MINIO_USER, AWS_SECRET_ACCESS_KEY=MINIO_PASSWORD)
    root = ["--root", str(tmp_path / "cache")]
    wrong_pg = pg_url.replace(PG_SECRET, "wrong-" + PG_SECRET)
    produced = [
        run("stage", f"s3://{bucket}/data/a.bin", *root, env=env),
        run("stage", f"s3://{bucket}/data/a.bin", *root, "--json", env=env),
        run("stage", f"s3://{bucket}/missing.bin", *root, env=env),
        run("ls", *root, env=env),
        run("ls", *root, "--json", env=env),
        run("du", *root, "--json", env=env),
        run("query", pg_url, "SELECT 1 AS one", *root, "--json", env=env),
        run("query", wrong_pg, "SELECT 1", *root, env=env),
        run("query", pg_url, "SELECT nope FROM nowhere", *root, env=env),
        run(
            "bench",
            *root,
            "--fs-size",
            "1MiB",
            "--db",
            pg_url,
            "--db-rows",
            "100",
            "--json",
            "--no-progress",
            env=env,
        ),
        run("bench", *root, "--fs-size", "1MiB", "--db", wrong_pg, env=env),
        run("out", str(tmp_path / "cache" / "index.sqlite"), f"s3://{bucket}/x/", env=env),
        run("out", str(tmp_path / "nothing"), f"s3://{bucket}/x/", env=env),
    ]
    assert any('"paths"' in text for text in produced)  # the commands did run
    assert any("password authentication failed" in text for text in produced)
    listing = json.loads(produced[4])
    assert listing and all("url" in entry for entry in listing)
    for text in produced:
        for secret in (MINIO_PASSWORD, PG_SECRET):
            assert secret not in text, f"{secret!r} printed: {text[:300]}"


def test_remote_staging_output_holds_no_secret(aws_conn, slurm_conn, put, bucket, pg_url, tmp_path):
    from airflow_exa_provider.hooks.staging import StagingHook

    put("r.bin", b"r" * 100)
    cli = os.path.join(os.path.dirname(sys.executable), "dask-staging")
    hook = StagingHook(str(tmp_path / "remote"), run_on="ssh", aws_conn_id=aws_conn,
                       slurm_conn_id=slurm_conn, remote_cli=cli)  # fmt: skip
    paths = hook.stage_in(
        urls=[f"s3://{bucket}/r.bin"], queries=[{"name": "q", "db_url": pg_url, "sql": "SELECT 2"}]
    )
    text = json.dumps(paths)
    assert "r.bin" in text and "q" in paths
    for secret in (MINIO_PASSWORD, PG_SECRET):
        assert secret not in text
