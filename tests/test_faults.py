"""Faults real clusters have: kill -9, dropped and stalled connections, restarted servers,
throttling, many processes under load.  Nothing may be lost, corrupted or half-written.

The heavier soak (more rounds, more processes) is ``benchmarks/soak.py``; its figures are
in docs/reliability.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dask_staging import Cache, stage_out
from dask_staging.errors import StagingError
from tests.conftest import MINIO_PASSWORD, MINIO_USER

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import faults

MiB = 1 << 20
SERVICES = str(Path(__file__).parent.parent / "scripts" / "services.sh")


def sizes(count_small: int, count_large: int) -> dict[str, int]:
    out = {f"small/{i:03d}": (32 << 10) * (1 + i % 8) for i in range(count_small)}
    out.update({f"large/{i:02d}": (5 + i % 4) * MiB + 12345 for i in range(count_large)})
    return out


def test_kill_9_at_random_moments_loses_nothing(s3, s3_env, bucket, tmp_path):
    objects = faults.seed(s3, bucket, sizes(16, 6))
    result = faults.kill9_soak(str(tmp_path / "cache"), objects, rounds=24, seed=7)
    # every kind of kill happened, and afterwards everything agreed (checked inside)
    assert all(n > 0 for n in result["killed"].values()), result
    assert result["bytes_verified"] >= sum(objects.values())  # every object, read back


def test_many_processes_reading_through_a_cache_smaller_than_the_data(s3, s3_env, bucket, tmp_path):
    objects = faults.seed(
        s3, bucket, {f"obj/{i:03d}": (16 << 10) * (1 + i % 8) for i in range(200)}
    )
    result = faults.load_soak(str(tmp_path / "cache"), objects, processes=8, gets=150)
    assert result["wrong_reads"] == 0
    assert result["misses"] > len(objects) * 0.5  # the cache is too small: evictions happened
    assert result["bytes_fetched"] >= sum(objects.values()) * 0.5


def test_a_root_owned_by_someone_else_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, 65534, 65534)
    with pytest.raises(StagingError, match=r"belongs to uid 65534, not to this user"):
        Cache(root)


def test_root_and_index_are_private(tmp_path):
    cache = Cache(tmp_path / "c")
    cache.stats()
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        assert (tmp_path / "c" / name).stat().st_mode & 0o777 == 0o600, name
    cache.close()


# -- S3 faults ----------------------------------------------------------------------------


def test_connections_reset_before_any_byte_fail_clearly_then_recover(put, cache_root, toxiproxy):
    url = put("reset.bin", os.urandom(2 * MiB))
    toxiproxy.add("reset_peer", {"timeout": 100}, name="reset")  # RST, nothing gets through
    cache = Cache(cache_root, part_size=MiB, retries=1, s3={"endpoint_url": toxiproxy.endpoint})
    start = time.monotonic()
    with pytest.raises(StagingError) as info:
        cache.get(url)
    assert time.monotonic() - start < 90 and len(str(info.value).splitlines()) == 1
    assert cache.stats()["retries"] >= 1
    assert not cache.contains(url) and not list((cache_root / "tmp").iterdir())
    toxiproxy.remove("reset")
    assert cache.get(url) and cache.verify() == []


def test_a_stalled_connection_times_out_with_one_clear_error(put, cache_root, toxiproxy):
    url = put("stall.bin", os.urandom(3 * MiB))
    toxiproxy.add("timeout", {"timeout": 0}, name="timeout")  # the server goes silent, forever
    cache = Cache(
        cache_root,
        part_size=MiB,
        retries=1,
        s3={"endpoint_url": toxiproxy.endpoint, "config_kwargs": {"read_timeout": 1}},
    )
    start = time.monotonic()
    with pytest.raises(StagingError) as info:
        cache.get(url)
    assert time.monotonic() - start < 60
    message = str(info.value)
    assert "stall.bin" in message and len(message.splitlines()) == 1
    assert MINIO_PASSWORD not in message
    assert not cache.contains(url) and not list((cache_root / "tmp").iterdir())
    toxiproxy.remove("timeout")
    assert cache.get(url)  # and it works once the link does


def upload_in_background(local, target: str, options: dict):
    """Start ``stage_out`` on a thread; returns the thread and the list its error lands in."""
    errors: list[BaseException] = []

    def upload():
        try:
            stage_out(local, target, part_size=5 * MiB, streams=2, **options)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=upload)
    thread.start()
    return thread, errors


def test_stage_out_never_leaves_a_half_object(s3, bucket, tmp_path, toxiproxy):
    local = tmp_path / "result.bin"
    local.write_bytes(os.urandom(32 * MiB))
    target = f"s3://{bucket}/out/result.bin"
    options = {"endpoint_url": toxiproxy.endpoint, "key": MINIO_USER, "secret": MINIO_PASSWORD}
    toxiproxy.add("bandwidth", {"rate": 4096}, stream="upstream", name="slow")  # ~8 s
    thread, errors = upload_in_background(local, target, options)
    time.sleep(2)
    toxiproxy.enable(False)  # the link dies mid-upload and stays down
    thread.join(180)
    assert errors and isinstance(errors[0], StagingError), errors
    assert MINIO_PASSWORD not in str(errors[0]) and len(str(errors[0]).splitlines()) == 1
    assert not s3.exists(f"{bucket}/out/result.bin")  # no half-object, nothing at all
    toxiproxy.enable(True)
    toxiproxy.remove("slow")
    stage_out(local, target, part_size=5 * MiB, streams=2, **options)
    assert s3.cat(f"{bucket}/out/result.bin") == local.read_bytes()


def test_minio_restarted_during_a_multipart_upload(s3, bucket, tmp_path, toxiproxy):
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(48 * MiB))
    target = f"s3://{bucket}/restart/big.bin"
    options = {"endpoint_url": toxiproxy.endpoint, "key": MINIO_USER, "secret": MINIO_PASSWORD}
    toxiproxy.add(
        "bandwidth", {"rate": 8192}, stream="upstream", name="bandwidth"
    )  # ~6 s at 8 MB/s
    thread, errors = upload_in_background(local, target, options)
    time.sleep(2)
    subprocess.run(["bash", SERVICES, "restart", "minio"], check=True, capture_output=True)
    thread.join(120)
    key = f"{bucket}/restart/big.bin"
    if errors:  # failed cleanly: nothing at the key
        assert isinstance(errors[0], StagingError), repr(errors[0])
        assert not s3.exists(key)
    else:  # retried through the restart: complete and exact
        assert s3.cat(key) == local.read_bytes()
    toxiproxy.remove("bandwidth")
    stage_out(local, target, part_size=5 * MiB, streams=2, **options)
    s3.invalidate_cache()
    assert s3.cat(key) == local.read_bytes()


@pytest.fixture
def throttled_minio(minio, tmp_path):
    """A second MinIO that refuses requests beyond one in flight."""
    with faults.throttled_minio(str(tmp_path / "data"), MINIO_USER, MINIO_PASSWORD, 1) as endpoint:
        yield endpoint


def test_throttled_requests_are_retried_to_the_right_bytes(throttled_minio, cache_root):
    import s3fs

    fs = s3fs.S3FileSystem(key=MINIO_USER, secret=MINIO_PASSWORD, endpoint_url=throttled_minio)
    fs.mkdir("throttled")
    objects = {f"throttled/o{i}": os.urandom(256 << 10) for i in range(40)}
    objects["throttled/big"] = os.urandom(12 * MiB)
    for path, data in objects.items():
        for attempt in range(20):  # seeding goes through the same throttle
            try:
                fs.pipe(path, data)
                break
            except Exception:
                time.sleep(0.1 * attempt)
    cache = Cache(
        cache_root,
        part_size=MiB,
        streams=8,
        retries=20,
        s3={"endpoint_url": throttled_minio, "key": MINIO_USER, "secret": MINIO_PASSWORD},
    )
    refused = faults.get_requests(throttled_minio, "minio_api_requests_errors_total")
    paths = cache.stage([f"s3://{p}" for p in objects])
    for path, data in objects.items():
        with open(paths[f"s3://{path}"], "rb") as f:
            assert f.read() == data
    assert cache.verify() == []
    assert faults.get_requests(throttled_minio, "minio_api_requests_errors_total") > refused


# -- PostgreSQL restarted mid-transfer ------------------------------------------------------


def restart_postgres_soon(delay: float) -> threading.Thread:
    def restart():
        time.sleep(delay)
        subprocess.run(["bash", SERVICES, "restart", "postgres"], check=True, capture_output=True)

    thread = threading.Thread(target=restart)
    thread.start()
    return thread


def count_rows(pg_url: str, table: str) -> int:
    import psycopg2

    for _ in range(50):  # the server may still be starting
        try:
            with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {table}")
                return cur.fetchone()[0]
        except psycopg2.OperationalError:
            time.sleep(0.2)
    raise AssertionError("PostgreSQL did not come back")


def test_postgres_restarted_during_a_parallel_write(pg_url, tmp_path):
    import uuid

    import pyarrow as pa

    from dask_staging import write_table

    table = f"t_{uuid.uuid4().hex[:8]}_restart"
    write_table(pa.table({"id": [-1, -2, -3], "x": [0.5, 1.5, 2.5]}), pg_url, table, mode="create")
    rows = 6_000_000
    big = pa.table({"id": pa.array(range(rows), pa.int64()), "x": pa.array([0.25] * rows)})
    restart = restart_postgres_soon(0.4)
    outcome = "complete"
    try:
        write_table(big, pg_url, table, mode="append", writers=4)
    except StagingError as exc:
        outcome = "failed"
        assert "exa-pg-secret" not in str(exc) and len(str(exc).splitlines()) == 1
    restart.join()
    assert count_rows(pg_url, table) == (3 + rows if outcome == "complete" else 3)
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:  # no staging table left
        cur.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE '\\_staging\\_%'")
        assert cur.fetchone()[0] == 0
    write_table(big, pg_url, table, mode="append", writers=4)  # and it works afterwards
    assert count_rows(pg_url, table) in (3 + rows, 3 + 2 * rows)
    write_table(big.slice(0, 1), pg_url, table, mode="replace")


def test_postgres_restarted_during_a_stage_in(pg_url, tmp_path):
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS fault_rows")
        cur.execute("CREATE TABLE fault_rows AS SELECT g AS id, md5(g::text) AS s "
                    "FROM generate_series(1, 3000000) g")  # fmt: skip
    cache = Cache(tmp_path / "cache")
    restart = restart_postgres_soon(0.3)
    try:
        path = cache.stage_query(pg_url, "SELECT * FROM fault_rows")
    except StagingError as exc:
        assert "exa-pg-secret" not in str(exc)
        assert cache.entries() == [] and not list((tmp_path / "cache" / "tmp").iterdir())
    else:
        import pyarrow.parquet as pq

        assert pq.read_metadata(path).num_rows == 3_000_000
    restart.join()
    count_rows(pg_url, "fault_rows")
    import pyarrow.parquet as pq

    assert (
        pq.read_metadata(cache.stage_query(pg_url, "SELECT * FROM fault_rows")).num_rows
        == 3_000_000
    )
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE fault_rows")


# -- Slurm jobs that run out of memory or time ------------------------------------------------


def test_jobs_that_run_out_of_memory_or_time_fail_the_task_clearly(slurm_conn):
    from airflow_exa_provider.hooks.slurm import SlurmHook
    from airflow_exa_provider.operators.slurm import SlurmJobFailed, SlurmJobOperator

    hook = SlurmHook(slurm_conn)
    hog = f"{sys.executable} -c 'x = bytearray(600 << 20); import time; time.sleep(60)'"
    oom = hook.submit(command=hog, options={"mem": "100M", "output": "/tmp/exa-oom-%j.out"})
    late = hook.submit(command="sleep 600", options={"time": "1", "output": "/tmp/exa-late-%j.out"})
    deadline = time.time() + 150
    states = {}
    while time.time() < deadline and len(states) < 2:
        for job in (oom, late):
            state = hook.state(job)
            if state.finished:
                states[job] = state
        time.sleep(1)
    # without cgroups, slurmd's memory accounting kills the job (SIGKILL): FAILED, not
    # OUT_OF_MEMORY, which needs task/cgroup; either way the task says what happened
    assert states[oom].state == "OUT_OF_MEMORY" or states[oom].signal == 9, states[oom]
    assert states[late].state == "TIMEOUT", states[late]
    operator = SlurmJobOperator(task_id="t", command="true", slurm_conn_id=slurm_conn)
    with pytest.raises(SlurmJobFailed, match=f"Slurm job {oom} ended .*memory limit") as info:
        operator._finish(oom, states[oom], states[oom].stdout)
    assert "killed by signal 9" in str(info.value) or "OUT_OF_MEMORY" in str(info.value)
    with pytest.raises(SlurmJobFailed, match=f"Slurm job {late} ended TIMEOUT"):
        operator._finish(late, states[late], states[late].stdout)
