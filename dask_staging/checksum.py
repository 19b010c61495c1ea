"""Composite checksums computed while downloading, part by part.

Parts arrive out of order over several streams, so one running hash over the
file is impossible.  Each part of ``part_size`` bytes gets its own XXH3-128
digest (16 GiB/s on one core, so hashing never limits a transfer); the file's
checksum is the XXH3-128 of the concatenated part digests, written as
``xxh3_128:<part_size>:<hex>``.  :func:`file_checksum` recomputes it from disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import xxhash

ALGORITHM = "xxh3_128"
new_part_hasher = xxhash.xxh3_128


def combine(part_size: int, digests: Iterable[bytes]) -> str:
    """The file checksum from its part digests, in file order."""
    return f"{ALGORITHM}:{part_size}:{xxhash.xxh3_128(b''.join(digests)).hexdigest()}"


def part_size_of(checksum: str) -> int:
    algorithm, part_size, _ = checksum.split(":")
    if algorithm != ALGORITHM:
        raise ValueError(f"unknown checksum algorithm {algorithm!r}")
    return int(part_size)


def file_checksum(path: str, part_size: int, block: int = 8 << 20) -> str:
    """Checksum of a local file, comparable with one computed while downloading."""
    digests = []
    with open(path, "rb", buffering=0) as f:
        while True:
            hasher = new_part_hasher()
            remaining = part_size
            while remaining:
                data = f.read(min(block, remaining))
                if not data:
                    break
                hasher.update(data)
                remaining -= len(data)
            if remaining == part_size:
                break
            digests.append(hasher.digest())
            if remaining:
                break
    if not digests:  # an empty file is one empty part
        digests.append(new_part_hasher().digest())
    return combine(part_size, digests)


def tree_size(path: str) -> int:
    """Bytes in a file, or in all files under a directory."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def path_checksum(path: str, part_size: int) -> str:
    """:func:`file_checksum` of a file; for a directory, one over its files' checksums."""
    if not os.path.isdir(path):
        return file_checksum(path, part_size)
    files = sorted(p for p in Path(path).rglob("*") if p.is_file())
    listing = "\n".join(
        f"{p.relative_to(path).as_posix()} {file_checksum(str(p), part_size)}" for p in files
    )
    return f"{ALGORITHM}:{part_size}:{xxhash.xxh3_128(listing.encode()).hexdigest()}"
