"""StagingPlugin on real Dask clusters: one download per node, prefetch, locality, metrics."""

from __future__ import annotations

import os
import time
import urllib.request

import dask
import fsspec
import pytest
from distributed import Client, LocalCluster

from dask_staging import (
    Cache,
    StagingError,
    StagingPlugin,
    config,
    locations,
    prefetch,
    submit_near,
    worker_stats,
)

MiB = 1 << 20


@pytest.fixture
def cluster(s3_env):
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def read_staged(url: str) -> int:
    with fsspec.open(f"staged::{url}") as f:
        return len(f.read())


def test_every_worker_of_a_node_shares_one_download(cluster, put, cache_root, get_count):
    client = cluster
    url = put("plugin/shared.bin", os.urandom(12 * MiB))
    client.register_plugin(StagingPlugin(root=str(cache_root), part_size="4 MiB"))
    client.register_plugin(StagingPlugin(root=str(cache_root)))  # idempotent: ignored
    workers = list(client.scheduler_info()["workers"])
    before = get_count()
    futures = [client.submit(read_staged, url, workers=[w], pure=False) for w in workers]
    assert client.gather(futures) == [12 * MiB] * 4
    assert get_count() - before == 3  # 12 MiB in 4 MiB parts, once for the node
    stats = worker_stats(client)
    assert sum(s["misses"] for s in stats.values()) == 1
    assert sum(s["hits"] for s in stats.values()) == 3
    assert {s["root"] for s in stats.values()} == {str(cache_root.resolve())}


def test_prefetch_and_locality(cluster, put, cache_root, get_count):
    client = cluster
    urls = [put(f"plugin/p-{i}", os.urandom(1000)) for i in range(8)]
    client.register_plugin(StagingPlugin(root=str(cache_root)))
    held = prefetch(client, urls, progress=False)
    assert list(held.values()) == [sorted(urls)]
    before = get_count()
    assert prefetch(client, urls) == held  # already on the node: nothing moves
    assert get_count() == before
    where = locations(client, urls)
    workers = set(client.scheduler_info()["workers"])
    assert set(where) == set(urls) and all(set(w) == workers for w in where.values())
    assert submit_near(client, read_staged, urls[0], where=where).result() == 1000
    assert get_count() == before
    with pytest.raises(ValueError, match="unknown worker"):
        prefetch(client, urls, workers=["tcp://127.0.0.1:1"])


def test_metrics_on_the_worker_endpoint(cluster, put, cache_root):
    client = cluster
    url = put("plugin/m", b"x" * 100)
    client.register_plugin(StagingPlugin(root=str(cache_root)))
    worker = next(iter(client.scheduler_info()["workers"]))
    client.submit(read_staged, url, workers=[worker], pure=False).result()
    client.submit(read_staged, url, workers=[worker], pure=False).result()
    port = client.run(lambda dask_worker: dask_worker.http_server.port, workers=[worker])[worker]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        text = r.read().decode()
    assert f'dask_staging_hits_total{{worker="{worker}"}} 1.0' in text
    assert f'dask_staging_misses_total{{worker="{worker}"}} 1.0' in text
    assert f'dask_staging_bytes_staged_total{{worker="{worker}"}} 100.0' in text


def test_teardown_closes_what_setup_opened(cluster, cache_root):
    client = cluster
    client.register_plugin(StagingPlugin(root=str(cache_root)))
    assert all(client.run(lambda dask_worker: "staging" in dask_worker.extensions).values())
    client.unregister_worker_plugin("dask-staging")
    assert not any(client.run(lambda dask_worker: "staging" in dask_worker.extensions).values())


def test_preload_reads_the_staging_config(s3_env, put, tmp_path, monkeypatch, get_count):
    url = put("plugin/preload", b"p" * 10)
    monkeypatch.setenv("STAGE_BASE", str(tmp_path))
    monkeypatch.setenv("DASK_STAGING__ROOT", "$STAGE_BASE/node-cache")  # expanded on the worker
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__PRELOAD", '["dask_staging.preload"]')
    dask.config.refresh()
    try:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as lc,
            Client(lc) as client,
        ):
            roots = client.run(lambda dask_worker: str(dask_worker.extensions["staging"].root))
            assert set(roots.values()) == {str((tmp_path / "node-cache").resolve())}
            futures = client.map(read_staged, [url] * 4, pure=False)
            assert client.gather(futures) == [10] * 4
    finally:
        monkeypatch.delenv("DASK_DISTRIBUTED__WORKER__PRELOAD")
        dask.config.refresh()
    assert Cache(tmp_path / "node-cache").contains(url)


def test_root_lists_fall_back_and_explain(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("JOBDIR", str(tmp_path / "job"))
    roots = [str(blocker / "cache"), "$NOT_SET_ANYWHERE/x", "$JOBDIR/cache"]
    assert config.resolve_root(roots, 0) == str(tmp_path / "job" / "cache")
    with pytest.raises(StagingError, match=r"only .* free, need"):
        config.resolve_root([str(tmp_path / "a")], "1000 PiB")
    with pytest.raises(StagingError) as info:
        config.resolve_root([str(blocker / "cache"), "$NOT_SET_ANYWHERE/x"], 0)
    assert "not a directory" in str(info.value) and "not set" in str(info.value)


def test_conflicting_limits_on_one_root_are_refused(cache_root):
    first = Cache(cache_root, max_bytes="1 GiB")
    with pytest.raises(StagingError, match=r"in use with max_bytes=1\.00 GiB, not 2\.00 GiB"):
        Cache(cache_root, max_bytes="2 GiB")
    assert Cache(cache_root).max_bytes is None  # no limit given: no conflict
    first.close()
    assert Cache(cache_root, max_bytes="2 GiB").max_bytes == 2 << 30


def test_unwritable_root_fails_registration(cluster, tmp_path):
    client = cluster
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StagingError, match="no usable cache root"):
        client.register_plugin(StagingPlugin(root=str(blocker / "cache")))


def test_a_worker_killed_mid_stage_leaves_no_corrupt_entry(s3_env, put, cache_root, toxiproxy):
    import hashlib

    data = os.urandom(6 * MiB)
    url = put("plugin/killed.bin", data)
    toxiproxy.add("bandwidth", {"rate": 1024})  # ~6 s through the proxy
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as lc,
        Client(lc) as client,
    ):
        client.register_plugin(
            StagingPlugin(
                root=str(cache_root), part_size="1 MiB", s3={"endpoint_url": toxiproxy.endpoint}
            )
        )
        future = client.submit(read_staged, url, pure=False)
        deadline = time.time() + 60
        while not list((cache_root / "tmp").glob("*.part")) and time.time() < deadline:
            time.sleep(0.05)
        client.run(
            os._exit, 1, on_error="ignore"
        )  # the worker dies mid-download; its nanny starts another
        assert not Cache(cache_root).contains(url)
        client.wait_for_workers(1, timeout=60)
        assert future.result(timeout=120) == 6 * MiB  # retried on the new worker

    cache = Cache(cache_root)
    assert cache.verify() == [] and not list((cache_root / "tmp").iterdir())
    with open(cache.get(url), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()


def test_config_defaults_match_their_schema():
    import jsonschema
    import yaml

    here = os.path.dirname(config.__file__)
    with open(os.path.join(here, "staging.yaml")) as f:
        defaults = yaml.safe_load(f)
    with open(os.path.join(here, "staging-schema.yaml")) as f:
        schema = yaml.safe_load(f)
    jsonschema.validate(defaults, schema)
    assert set(defaults["staging"]) == set(schema["properties"]["staging"]["properties"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"staging": {"streams": 0}}, schema)
    assert dask.config.get("staging.min-free") == "1 GiB"
