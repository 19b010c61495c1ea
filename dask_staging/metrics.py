"""Prometheus metrics of the caches that workers use, on the worker's ``/metrics``.

Dask workers serve ``prometheus_client``'s default registry; one collector per
process reports every cache a :class:`~dask_staging.StagingPlugin` opened,
labelled with the worker's address.
"""

from __future__ import annotations

import threading

_caches: dict[str, object] = {}
_lock = threading.Lock()
_registered = False

COUNTERS = {
    "hits": "Cache hits (accesses served from local disk)",
    "misses": "Objects staged in by this process",
    "bytes_staged": "Bytes downloaded into the cache by this process",
    "bytes_served": "Bytes served from the cache by this process",
    "evictions": "Entries evicted by this process",
}


def track(worker: str, cache) -> None:
    """Report ``cache`` as the cache of ``worker``."""
    global _registered
    with _lock:
        _caches[worker] = cache
        if not _registered:
            try:
                import prometheus_client
            except ImportError:
                return
            prometheus_client.REGISTRY.register(_Collector())
            _registered = True


def untrack(worker: str) -> None:
    with _lock:
        _caches.pop(worker, None)


class _Collector:
    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with _lock:
            caches = dict(_caches)
        families = {
            name: CounterMetricFamily(f"dask_staging_{name}", text, labels=["worker"])
            for name, text in COUNTERS.items()
        }
        cached = GaugeMetricFamily(
            "dask_staging_cached_bytes", "Bytes held by the node's cache", labels=["worker"]
        )
        for worker, cache in caches.items():
            stats = cache.stats()
            for name, family in families.items():
                family.add_metric([worker], stats[name])
            cached.add_metric([worker], stats["bytes_cached"])
        yield from families.values()
        yield cached

    def describe(self):
        return []
