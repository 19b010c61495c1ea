"""The ``staged::`` fsspec protocol: read any fsspec URL through the cache.

>>> import fsspec  # doctest: +SKIP
>>> with fsspec.open("staged::s3://bucket/key", staged={"root": "/scratch/cache"}) as f:
...     header = f.read(16)

Opening a file stages it (once per node) and returns the local copy; listing
and metadata (``ls``, ``info``, ``find``, ``glob`` ...) go to the target
filesystem, so ``dask.dataframe.read_parquet("staged::s3://bucket/dir/")`` works.
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.chained import ChainedFileSystem

from dask_staging.cache import Cache
from dask_staging.config import cache_options, resolve_root

_caches: dict[tuple, Cache] = {}
_caches_lock = threading.Lock()
_node_default: tuple[str, dict] | None = None  # (root, settings) set by StagingPlugin


def set_node_default(root: str | None, settings: dict | None = None) -> None:
    """Make ``staged::`` URLs without their own ``root`` use this cache (None: undo)."""
    global _node_default
    _node_default = None if root is None else (root, dict(settings or {}))


def default_root() -> str:
    """The root used when neither an argument nor ``staging.root`` names one."""
    user = os.environ.get("USER") or str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"dask-staging-{user}")


def shared_cache(root: str, **kwargs: Any) -> Cache:
    """One :class:`Cache` per process for each distinct configuration."""
    key = (
        os.path.abspath(os.path.expandvars(os.path.expanduser(root))),
        repr(sorted(kwargs.items())),
    )
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            cache = _caches[key] = Cache(root, **kwargs)
        return cache


def release_shared(cache: Cache) -> None:
    """Forget and close a cache made by :func:`shared_cache`."""
    with _caches_lock:
        for key, value in list(_caches.items()):
            if value is cache:
                del _caches[key]
    cache.close()


class StagedFileSystem(ChainedFileSystem):
    """Read-through cache over a target filesystem.

    Parameters
    ----------
    target_protocol : str
        Protocol of the filesystem underneath (set by fsspec from the URL chain).
    target_options : dict
        Options of the target filesystem (``key``, ``endpoint_url``, ...).
    root : str, optional
        Cache directory; default ``staging.root`` from Dask's config.
    max_bytes, streams, index_url, revalidate, part_size :
        As for :class:`~dask_staging.Cache`.
    """

    protocol: ClassVar[str | tuple[str, ...]] = "staged"

    def __init__(
        self,
        target_protocol: str | None = None,
        target_options: dict | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
        root: str | None = None,
        max_bytes: int | str | None = None,
        streams: int | None = None,
        index_url: str | None = None,
        revalidate: str | float | None = None,
        part_size: int | str | None = None,
        **kwargs: Any,
    ):
        kwargs.pop("fo", None)
        super().__init__(**kwargs)
        if fs is None and target_protocol is None:
            raise ValueError("staged:: needs a target, e.g. staged::s3://bucket/key")
        self.target_protocol = target_protocol or _first(fs.protocol)
        self.target_options = dict(target_options or {})
        self.fs = (
            fs if fs is not None else fsspec.filesystem(target_protocol, **self.target_options)
        )
        explicit = {
            "max_bytes": max_bytes,
            "streams": streams,
            "index_url": index_url,
            "revalidate": revalidate,
            "part_size": part_size,
        }
        if root is None and _node_default is not None:  # a worker with StagingPlugin
            root, settings = _node_default
        else:
            root, settings = resolve_root(root), cache_options()
        settings.update({k: v for k, v in explicit.items() if v is not None})
        storage = {self.target_protocol: self.target_options} if self.target_options else {}
        self.cache = shared_cache(root, **settings, **storage)

        def _strip_protocol(path):
            # Accept "staged::s3://b/k", "s3://b/k" and "b/k" alike.
            return self.fs._strip_protocol(type(self)._strip_protocol(path))

        self._strip_protocol = _strip_protocol

    def _url(self, path: str) -> str:
        return f"{self.target_protocol}://{self._strip_protocol(path)}"

    def _open(self, path, mode="rb", **kwargs):
        if "r" not in mode or "+" in mode:
            raise NotImplementedError(
                f"staged:: is read-only (mode {mode!r}); write results with dask_staging.stage_out"
            )
        return self.cache.open(self._url(path))

    def local_path(self, path: str) -> str:
        """Stage ``path`` and return its local file name."""
        return self.cache.get(self._url(path))

    # Metadata goes to the target filesystem.
    def ls(self, path, detail=True, **kwargs):
        return self.fs.ls(self._strip_protocol(path), detail=detail, **kwargs)

    def info(self, path, **kwargs):
        return self.fs.info(self._strip_protocol(path), **kwargs)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        return self.fs.find(
            self._strip_protocol(path),
            maxdepth=maxdepth,
            withdirs=withdirs,
            detail=detail,
            **kwargs,
        )

    def glob(self, path, maxdepth=None, **kwargs):
        return self.fs.glob(self._strip_protocol(path), maxdepth=maxdepth, **kwargs)

    def exists(self, path, **kwargs):
        return self.fs.exists(self._strip_protocol(path), **kwargs)

    def isdir(self, path):
        return self.fs.isdir(self._strip_protocol(path))

    def isfile(self, path):
        return self.fs.isfile(self._strip_protocol(path))

    def ukey(self, path):
        return self.fs.ukey(self._strip_protocol(path))

    def invalidate_cache(self, path=None):
        self.fs.invalidate_cache(path)


def _first(protocol):
    return protocol if isinstance(protocol, str) else protocol[0]
