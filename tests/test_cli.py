"""The dask-staging command line, run as users run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DASK_STAGING = os.path.join(os.path.dirname(sys.executable), "dask-staging")


@pytest.fixture
def cli(s3_env, cache_root):
    def run(*args: str, root: bool = True):
        cmd = [DASK_STAGING, *args] + (["--root", str(cache_root)] if root else [])
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ)

    return run


def test_help_explains_every_command():
    out = subprocess.run([DASK_STAGING, "--help"], capture_output=True, text=True).stdout
    for command in ("stage", "ls", "du", "evict", "pin", "unpin", "verify", "out"):
        assert command in out
    assert "AWS_ENDPOINT_URL" in out


def test_stage_ls_du_pin_evict_verify(cli, put):
    a, b = put("a.bin", os.urandom(3000)), put("b.bin", os.urandom(5000))
    r = cli("stage", a, b)
    assert r.returncode == 0, r.stderr
    assert "2 object(s) ready: 2 downloaded" in r.stdout
    assert "B/s" in r.stderr or "B" in r.stderr  # the progress bar
    r = cli("stage", a, "--json")
    assert json.loads(r.stdout)["downloaded"] == 0

    listing = json.loads(cli("ls", "--json").stdout)
    assert {e["url"] for e in listing} == {a, b}
    assert "kiB" in cli("ls").stdout
    du = json.loads(cli("du", "--json").stdout)
    assert du["bytes_cached"] == 8000 and du["entries"] == 2

    assert cli("pin", a).returncode == 0
    r = cli("evict", a)
    assert r.returncode == 1 and "is pinned" in r.stderr and len(r.stderr.splitlines()) == 1
    assert json.loads(cli("evict", "--json").stdout)["freed"] == 5000
    assert cli("unpin", a).returncode == 0
    assert cli("verify").stdout.strip() == "all entries verified"
    assert json.loads(cli("evict", "--to-bytes", "0", "--json").stdout)["freed"] == 3000


def test_verify_exit_status(cli, put, cache_root):
    url = put("x.bin", os.urandom(4096))
    cli("stage", url)
    [entry] = json.loads(cli("ls", "--json").stdout)
    (cache_root / entry["path"]).write_bytes(b"corrupt")
    r = cli("verify", "--json")
    assert r.returncode == 1 and json.loads(r.stdout) == {"failed": [url]}


def test_errors_are_one_line_with_nonzero_status(cli, bucket):
    r = cli("stage", f"s3://{bucket}/nope")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"dask-staging: error: s3://{bucket}/nope does not exist"
    )
    r = cli("stage", "not-a-url")
    assert r.returncode == 1 and "has no protocol" in r.stderr
    r = cli("unpin", f"s3://{bucket}/never-staged")
    assert r.returncode == 1 and "is not in the cache" in r.stderr
    r = cli("evict", "--to-bytes", "lots")
    assert r.returncode == 2 and "not a size" in r.stderr


def test_out_uploads_files_and_directories(cli, s3, bucket, tmp_path):
    results = tmp_path / "results"
    (results / "sub").mkdir(parents=True)
    (results / "a.csv").write_text("a,b\n1,2\n")
    (results / "sub" / "big.bin").write_bytes(os.urandom(20 << 20))
    r = cli("out", str(results), f"s3://{bucket}/run-1/")
    assert r.returncode == 0, r.stderr
    assert s3.cat(f"{bucket}/run-1/a.csv") == b"a,b\n1,2\n"
    assert s3.cat(f"{bucket}/run-1/sub/big.bin") == (results / "sub" / "big.bin").read_bytes()
    r = cli("out", str(tmp_path / "missing"), f"s3://{bucket}/x")
    assert r.returncode == 1 and "does not exist" in r.stderr
