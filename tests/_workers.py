"""Functions run in child processes by the concurrency tests (importable under spawn)."""

from __future__ import annotations

import hashlib
import os


def get_after_barrier(root, url, part_size, barrier, results):
    from dask_staging import Cache

    cache = Cache(root, part_size=part_size, streams=4)
    barrier.wait(timeout=60)
    path = cache.get(url)
    with open(path, "rb") as f:
        results.put((os.getpid(), path, hashlib.sha256(f.read()).hexdigest()))
    cache.close()


def slow_get(root, url, endpoint):
    """Download through a throttled proxy (the parent kills this process midway)."""
    from dask_staging import Cache

    cache = Cache(root, part_size=1 << 20, streams=2, s3={"endpoint_url": endpoint})
    cache.get(url)


def get_in_forked_child(cache, url, results):
    """Use a Cache inherited through fork (its pools and connections are the parent's)."""
    path = cache.get(url)
    with open(path, "rb") as f:
        results.put(hashlib.sha256(f.read()).hexdigest())


def get_as_host(host, root, index_url, url, barrier, results, endpoint=None, lease=60.0):
    """Stage ``url`` as if running on ``host``, sharing ``index_url`` with other hosts."""
    os.environ["DASK_STAGING_HOSTNAME"] = host
    from dask_staging import Cache

    options = {"s3": {"endpoint_url": endpoint}} if endpoint else {}
    cache = Cache(root, index_url=index_url, part_size=2 << 20, streams=2, lease=lease, **options)
    if barrier is not None:
        barrier.wait(timeout=60)
    path = cache.get(url)
    with open(path, "rb") as f:
        results.put((host, path, hashlib.sha256(f.read()).hexdigest()))


def hold_open_as_host(host, root, index_url, url, opened, release):
    """Open ``url`` through the cache as ``host`` and keep it open until told."""
    os.environ["DASK_STAGING_HOSTNAME"] = host
    from dask_staging import Cache

    cache = Cache(root, index_url=index_url)
    with cache.open(url):
        opened.set()
        release.wait(60)
