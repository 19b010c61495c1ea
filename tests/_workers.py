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
