"""Dask integration: a worker plugin that opens the node's cache, prefetching and locality.

Every worker on a node opens the same root and index, so each object is
downloaded once per node whichever worker (or Airflow task) asks first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from dask_staging import config, fs, metrics
from dask_staging.errors import StagingError


class StagingPlugin(WorkerPlugin):
    """Open a node-local staging cache on every worker.

    Parameters
    ----------
    root : str or list of str, optional
        Cache root(s), expanded on the worker (``$TMPDIR``, ``$SLURM_JOB_ID``);
        a list is tried in order with a free-space check.  Default
        ``staging.root`` from Dask's config.
    max_bytes, streams, index_url, min_free :
        As in the ``staging`` config; unset values come from it.
    **options
        More :class:`~dask_staging.Cache` keywords (``part_size=``,
        ``revalidate=``) and per-protocol storage options (``s3={...}``).

    Examples
    --------
    >>> plugin = StagingPlugin(root="$TMPDIR/stage", max_bytes="100 GiB")
    >>> client.register_plugin(plugin)  # doctest: +SKIP
    """

    name = "dask-staging"
    idempotent = True

    def __init__(
        self,
        root: str | list[str] | None = None,
        max_bytes: int | str | None = None,
        streams: int | None = None,
        index_url: str | None = None,
        min_free: int | str | None = None,
        **options: Any,
    ):
        self.root = root
        self.min_free = min_free
        self.settings = {"max_bytes": max_bytes, "streams": streams, "index_url": index_url}
        self.options = options
        self.cache = None

    def setup(self, worker) -> None:
        root = config.resolve_root(self.root, self.min_free)
        settings = config.cache_options(**self.settings, **self.options)
        storage = {k: v for k, v in self.options.items() if isinstance(v, dict)}
        self.cache = fs.shared_cache(root, **settings, **storage)
        worker.extensions["staging"] = self.cache
        fs.set_node_default(root, {**settings, **storage})
        metrics.track(worker.address, self.cache)

    def teardown(self, worker) -> None:
        if self.cache is None:
            return
        metrics.untrack(worker.address)
        if worker.extensions.get("staging") is self.cache:
            del worker.extensions["staging"]
        fs.set_node_default(None)
        fs.release_shared(self.cache)
        self.cache = None


def worker_cache():
    """The cache of the worker running the current task."""
    return _cache_of(get_worker())


def _stage_here(urls: list[str]) -> tuple[str, dict[str, str]]:
    return get_worker().address, worker_cache().stage(urls)


def _cache_of(dask_worker):
    cache = dask_worker.extensions.get("staging")
    if cache is None:
        raise StagingError(
            f"StagingPlugin is not registered on worker {dask_worker.address}; "
            "call client.register_plugin(StagingPlugin(...)) first"
        )
    return cache


def _holds(urls: list[str], dask_worker=None) -> list[str]:
    cache = _cache_of(dask_worker)
    return [url for url in urls if cache.contains(url)]


def _stats(dask_worker=None) -> dict:
    return _cache_of(dask_worker).stats()


def prefetch(
    client, urls: Iterable[str], workers: Iterable[str] | None = None, *, progress: bool = False
) -> dict[str, list[str]]:
    """Stage ``urls`` on the nodes of ``workers`` (default: all) before computing.

    Each node downloads each object once; the URLs are spread over the
    node's workers.  Returns ``{host: [urls held]}``.
    """
    urls = list(dict.fromkeys(urls))
    info = client.scheduler_info(n_workers=-1)["workers"]
    chosen = list(workers) if workers is not None else list(info)
    unknown = [w for w in chosen if w not in info]
    if unknown:
        raise ValueError(f"unknown worker(s): {', '.join(unknown)}")
    by_host: dict[str, list[str]] = defaultdict(list)
    for address in chosen:
        by_host[info[address]["host"]].append(address)
    futures = []
    for addresses in by_host.values():
        for i, address in enumerate(addresses):
            share = urls[i :: len(addresses)]
            if share:
                futures.append(
                    client.submit(
                        _stage_here, share, workers=[address], allow_other_workers=False, pure=False
                    )
                )
    if progress:
        from distributed import progress as show

        show(futures)
    held: dict[str, list[str]] = defaultdict(list)
    for address, paths in client.gather(futures):
        held[info[address]["host"]].extend(paths)
    return {host: sorted(paths) for host, paths in held.items()}


def locations(client, urls: Iterable[str]) -> dict[str, list[str]]:
    """``{url: [workers whose node has it cached]}`` (one worker asked per node)."""
    urls = list(urls)
    info = client.scheduler_info(n_workers=-1)["workers"]
    hosts: dict[str, list[str]] = defaultdict(list)
    for address, worker in info.items():
        hosts[worker["host"]].append(address)
    asked = [addresses[0] for addresses in hosts.values()]
    held = client.run(_holds, urls, workers=asked)
    out: dict[str, list[str]] = defaultdict(list)
    for address, have in held.items():
        for url in have:
            out[url].extend(hosts[info[address]["host"]])
    return dict(out)


def submit_near(client, fn, url: str, *args, where: dict | None = None, **kwargs):
    """``client.submit(fn, url, ...)`` preferring workers whose node caches ``url``.

    ``where`` is a :func:`locations` result to reuse across many submits.
    """
    holders = (where if where is not None else locations(client, [url])).get(url)
    return client.submit(
        fn, url, *args, workers=holders or None, allow_other_workers=True, **kwargs
    )


def worker_stats(client) -> dict[str, dict]:
    """The staging counters of every worker: ``{worker address: stats}``."""
    return client.run(_stats)
