"""Any other fsspec filesystem (GCS, Azure, HTTP, local files, memory, ...).

Ranged reads are ``cat_file(path, start, end)`` calls, so the
same multi-stream downloader serves every protocol fsspec knows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec

from dask_staging.errors import (
    RemoteAccessError,
    RemoteChangedError,
    RemoteNotFoundError,
    TransferError,
)
from dask_staging.transfer import ObjectInfo


class _Body:
    """Bytes ``[start, end)`` of a file, read in a thread when asked for."""

    def __init__(self, fs, path: str, start: int, end: int):
        self.fs, self.path, self.start, self.end = fs, path, start, end

    def read(self) -> bytes:
        if self.end <= self.start:
            return b""
        return self.fs.cat_file(self.path, start=self.start, end=self.end)

    def chunks(self):
        data = self.read()
        return [data] if data else []


class FsspecEngine:
    """Ranged reads, info and uploads through an fsspec filesystem."""

    def __init__(self, protocol: str, options: dict[str, Any]):
        self.protocol = protocol
        self.options = dict(options)
        self.fs = fsspec.filesystem(protocol, **self.options)

    def _path(self, url: str) -> str:
        return self.fs._strip_protocol(url)

    def _info(self, url: str) -> ObjectInfo:
        info = self.fs.info(self._path(url))
        if info.get("type") == "directory":
            raise RemoteNotFoundError(f"{url} is a directory, not a file")
        etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
        if etag is None and "mtime" in info:
            etag = f"mtime:{info['mtime']}"
        return ObjectInfo(size=int(info["size"]), etag=etag)

    def open_range(self, url: str, start: int, end: int, etag: str | None):
        info = self._info(url)
        if etag is not None and info.etag != etag:
            raise FileExistsError(f"{url} changed during the transfer")
        return info, _Body(self.fs, self._path(url), start, min(end, info.size))

    def head(self, url: str) -> ObjectInfo:
        try:
            return self._info(url)
        except Exception as exc:
            raise self.translate(exc, url) from None

    def put_file(self, local: Path, url: str, *, part_size: int, streams: int) -> None:
        try:
            self.fs.put_file(str(local), self._path(url))
        except Exception as exc:
            raise self.translate(exc, url) from None

    def is_permanent(self, exc: BaseException) -> bool:
        return isinstance(exc, FileNotFoundError | PermissionError | FileExistsError | ValueError)

    def translate(self, exc: BaseException, url: str) -> BaseException:
        if isinstance(exc, RemoteNotFoundError):
            return exc
        if isinstance(exc, FileNotFoundError):
            return RemoteNotFoundError(f"{url} does not exist")
        if isinstance(exc, PermissionError):
            return RemoteAccessError(f"access to {url} was denied")
        if isinstance(exc, FileExistsError):
            return RemoteChangedError(f"{url} changed during the transfer")
        return TransferError(f"could not transfer {url} after retries ({type(exc).__name__})")
