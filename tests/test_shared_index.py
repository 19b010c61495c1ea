"""One cache index in PostgreSQL shared by several hosts over one scratch directory.

Hosts are simulated by processes with different DASK_STAGING_HOSTNAME values:
to each other they are on other hosts, so only leases (not pids) tell liveness.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid

import pytest

from dask_staging import Cache
from tests import _workers
from tests.test_cache import sha

MiB = 1 << 20


@pytest.fixture
def index_url(pg_url):
    """A fresh PostgreSQL database holding only this test's index."""
    import psycopg2

    name = f"idx_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    yield pg_url.rsplit("/", 1)[0] + f"/{name}"
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def test_single_flight_across_hosts(put, cache_root, index_url, get_count):
    data = os.urandom(16 * MiB)
    url = put("shared/across-hosts.bin", data)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    hosts = ["node-a", "node-b", "node-c", "node-d"]
    procs = [
        ctx.Process(
            target=_workers.get_as_host, args=(h, str(cache_root), index_url, url, barrier, results)
        )
        for h in hosts
    ]
    before = get_count()
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert get_count() - before == 8  # 16 MiB / 2 MiB parts, once for all hosts
    assert {g[2] for g in got} == {sha(data)} and len({g[1] for g in got}) == 1


def test_a_dead_host_is_taken_over_when_its_lease_ends(put, cache_root, index_url, toxiproxy):
    data = os.urandom(8 * MiB)
    url = put("shared/slow.bin", data)
    toxiproxy.add("bandwidth", {"rate": 512})  # KB/s: the download takes ~16 s
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    slow = ctx.Process(
        target=_workers.get_as_host,
        args=("node-a", str(cache_root), index_url, url, None, results, toxiproxy.endpoint, 2.0),
    )
    slow.start()
    deadline = time.time() + 60
    while not list((cache_root / "tmp").glob("*.part")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(slow.pid, signal.SIGKILL)  # node-a dies mid-download, holding its claim
    slow.join()
    start = time.time()
    taker = ctx.Process(
        target=_workers.get_as_host,
        args=("node-b", str(cache_root), index_url, url, None, results, None, 2.0),
    )
    taker.start()
    host, _, digest = results.get(timeout=60)
    taker.join(30)
    assert host == "node-b" and digest == sha(data)
    assert 1.5 < time.time() - start < 30  # it waited for node-a's lease, then took over


def test_eviction_spares_files_open_on_other_hosts(put, cache_root, index_url, monkeypatch):
    url, other = put("shared/open.bin", b"a" * 1000), put("shared/free.bin", b"b" * 1000)
    monkeypatch.setenv("DASK_STAGING_HOSTNAME", "node-b")
    cache = Cache(cache_root, index_url=index_url)
    cache.stage([url, other])
    ctx = multiprocessing.get_context("spawn")
    opened, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(
        target=_workers.hold_open_as_host,
        args=("node-a", str(cache_root), index_url, url, opened, release),
    )
    holder.start()
    try:
        assert opened.wait(60)
        assert cache.evict() == 1000  # only the file nobody reads
        assert cache.contains(url) and not cache.contains(other)
    finally:
        release.set()
        holder.join(30)
    assert cache.evict() == 1000 and cache.entries() == []
