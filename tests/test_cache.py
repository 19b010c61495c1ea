"""The cache against a real MinIO: transfers, single flight, crashes, eviction, errors."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import time

import pytest

from dask_staging import (
    Cache,
    CacheFullError,
    DiskFullError,
    EntryInUseError,
    RemoteAccessError,
    RemoteNotFoundError,
    TransferError,
)
from tests import _workers

MiB = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_multipart_download_is_exact_and_verified(put, cache_root, get_count):
    data = os.urandom(5 * MiB + 12345)
    url = put("big/object.bin", data)
    cache = Cache(cache_root, part_size=MiB, streams=4)
    before = get_count()
    path = cache.get(url)
    assert get_count() - before == 6  # one GET per part, no HEAD, no extra reads
    assert read(path) == data
    assert path.startswith(str(cache_root.resolve())) and path.endswith(".bin")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert cache.verify() == []
    [entry] = cache.entries()
    assert entry.size == len(data) and entry.etag and entry.checksum.startswith("xxh3_128:")
    assert not list((cache_root / "tmp").iterdir())


def test_hits_do_not_touch_the_server(put, cache_root, get_count):
    url = put("k", b"payload")
    cache = Cache(cache_root)
    first = cache.get(url)
    before = get_count()
    assert [cache.get(url) for _ in range(20)] == [first] * 20
    assert get_count() == before
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["bytes_cached"]) == (20, 1, 7)
    assert cache.contains(url) and not cache.contains(url + "-other")


def test_small_and_empty_objects(put, cache_root):
    urls = {put(f"many/{i:04d}", os.urandom(i * 100)): i for i in range(50)}
    empty = put("empty", b"")
    cache = Cache(cache_root)
    paths = cache.stage([*urls, empty])
    for url, i in urls.items():
        assert len(read(paths[url])) == i * 100
    assert read(paths[empty]) == b""
    assert cache.stats()["entries"] == 51
    assert cache.verify() == []


def test_single_flight_across_eight_processes(put, cache_root, get_count):
    data = os.urandom(24 * MiB)
    url = put("shared.bin", data)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(
            target=_workers.get_after_barrier,
            args=(str(cache_root), url, 2 * MiB, barrier, results),
        )
        for _ in range(8)
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
    assert [p.exitcode for p in procs] == [0] * 8
    assert get_count() - before == 12  # 24 MiB / 2 MiB parts, fetched once in all
    assert {path for _, path, _ in got} == {got[0][1]}
    assert {digest for _, _, digest in got} == {sha(data)}


def test_threads_share_one_download(put, cache_root, get_count):
    from concurrent.futures import ThreadPoolExecutor

    url = put("t.bin", os.urandom(3 * MiB))
    cache = Cache(cache_root, part_size=MiB)
    before = get_count()
    with ThreadPoolExecutor(8) as pool:
        paths = set(pool.map(lambda _: cache.get(url), range(8)))
    assert len(paths) == 1 and get_count() - before == 3


def test_kill_9_mid_download_leaves_nothing_visible(put, cache_root, toxiproxy):
    data = os.urandom(12 * MiB)
    url = put("slow.bin", data)
    toxiproxy.add("bandwidth", {"rate": 1024})  # KB/s per connection: ~6 s for the object
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_workers.slow_get, args=(str(cache_root), url, toxiproxy.endpoint))
    proc.start()
    tmp = cache_root / "tmp"
    deadline = time.time() + 60
    while time.time() < deadline:
        parts = list(tmp.glob("*.part")) if tmp.exists() else []
        if parts and parts[0].stat().st_blocks:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the downloader never started writing")
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    cache = Cache(cache_root, part_size=MiB)
    assert not cache.contains(url)
    assert not any((cache_root / "data").rglob("*.bin"))
    assert cache.entries() == []
    start = time.time()
    assert read(cache.get(url)) == data  # the dead claim is taken over at once
    assert time.time() - start < 10
    assert not list(tmp.iterdir()), "the crashed download's temp file must be reclaimed"


def test_resumes_parts_when_connections_drop(put, cache_root, toxiproxy, get_count):
    data = os.urandom(8 * MiB)
    url = put("flaky.bin", data)
    # every connection dies after 1.5 MiB: each 2 MiB part must resume midway
    toxiproxy.add("limit_data", {"bytes": 3 * MiB // 2})
    cache = Cache(cache_root, part_size=2 * MiB, streams=2, s3={"endpoint_url": toxiproxy.endpoint})
    before = get_count()
    assert read(cache.get(url)) == data
    assert cache.verify() == []
    assert get_count() - before >= 8  # each of the 4 parts was cut and resumed


def test_lru_eviction_skips_pinned_and_recent(put, cache_root):
    urls = [put(f"e/{i}", bytes([i]) * 1000) for i in range(4)]
    cache = Cache(cache_root)
    for url in urls:
        cache.get(url)
        time.sleep(0.01)
    cache.get(urls[0])  # now most recently used
    cache.pin(urls[1])  # oldest, but pinned
    assert cache.evict(to_bytes=2000) == 2000
    left = {e.url for e in cache.entries()}
    assert left == {urls[0], urls[1]}
    with pytest.raises(EntryInUseError, match="pinned"):
        cache.evict(urls[1])
    cache.unpin(urls[1])
    assert cache.evict(urls[1]) == 1000
    assert cache.evict() == 1000 and cache.entries() == []


def test_max_bytes_bounds_the_cache(put, cache_root):
    urls = [put(f"m/{i}", os.urandom(1000)) for i in range(10)]
    cache = Cache(cache_root, max_bytes=3500)
    for url in urls:
        cache.get(url)
        assert cache.stats()["bytes_cached"] <= 3500
    assert cache.contains(urls[-1]) and not cache.contains(urls[0])
    with pytest.raises(CacheFullError, match="larger than the cache limit"):
        cache.get(put("huge", os.urandom(4000)))


def test_open_entries_are_not_evicted(put, cache_root):
    url, other = put("open", b"x" * 100), put("other", b"y" * 100)
    cache = Cache(cache_root)
    cache.stage([url, other])
    with cache.open(url) as f:
        with pytest.raises(EntryInUseError, match="open by another reader"):
            cache.evict(url)
        assert cache.evict() == 100
        assert f.read() == b"x" * 100
    assert cache.evict() == 100


def test_revalidation_policies(put, cache_root):
    url = put("v", b"version-1")
    never = Cache(cache_root / "never")
    always = Cache(cache_root / "always", revalidate="always")
    assert read(never.get(url)) == read(always.get(url)) == b"version-1"
    put("v", b"version-2!")
    assert read(never.get(url)) == b"version-1"
    assert read(always.get(url)) == b"version-2!"
    assert always.verify() == []
    with pytest.raises(ValueError, match="revalidate"):
        Cache(cache_root / "bad", revalidate="sometimes")


def test_verify_finds_and_removes_corrupt_copies(put, cache_root):
    data = os.urandom(3 * MiB)
    url = put("c.bin", data)
    cache = Cache(cache_root, part_size=MiB)
    path = cache.get(url)
    with open(path, "r+b") as f:
        f.seek(MiB + 7)
        f.write(b"\xff")
    assert cache.verify() == [url]
    assert cache.verify(remove=True) == [url]
    assert not cache.contains(url)
    assert read(cache.get(url)) == data


def test_missing_bucket_key_and_bad_credentials(s3_env, bucket, put, cache_root):
    cache = Cache(cache_root)
    with pytest.raises(RemoteNotFoundError, match="bucket 'no-such-bucket-x' does not exist"):
        cache.get("s3://no-such-bucket-x/key")
    with pytest.raises(RemoteNotFoundError, match=f"s3://{bucket}/missing does not exist"):
        cache.get(f"s3://{bucket}/missing")
    url = put("secret-test", b"data")
    bad = Cache(cache_root, s3={"key": "exa-minio", "secret": "wrong-secret-value-123"})
    with pytest.raises(RemoteAccessError) as info:
        bad.get(url)
    assert "check the credentials" in str(info.value)
    assert "wrong-secret-value-123" not in str(info.value)
    assert cache.entries() == [] and not list((cache_root / "tmp").iterdir())


def test_unreachable_endpoint_is_a_clear_error(s3_env, cache_root):
    cache = Cache(cache_root, retries=1, s3={"endpoint_url": "http://127.0.0.1:9"})
    with pytest.raises(TransferError, match="could not be reached"):
        cache.get("s3://bucket/key")
    assert cache.entries() == []


def test_full_disk_evicts_then_fails_cleanly(put, small_disk):
    blobs = {}
    for i in range(3):
        data = os.urandom(8 * MiB)
        blobs[put(f"d/{i}", data)] = data
    cache = Cache(small_disk / "cache", part_size=2 * MiB)
    for url in blobs:  # the third does not fit beside the first two: LRU makes room
        cache.get(url)
    assert cache.stats()["evictions"] >= 1
    last = list(blobs)[-1]
    assert cache.contains(last)
    huge = put("d/huge", os.urandom(30 * MiB))
    with cache.open(last) as reader:  # an application reading a cached file meanwhile
        first = reader.read(MiB)
        with pytest.raises(DiskFullError, match="no space left on the disk"):
            cache.get(huge)
        rest = reader.read()
    assert first + rest == blobs[last] and cache.contains(last)  # kept, and read whole
    assert not cache.contains(huge)
    assert not list((small_disk / "cache" / "tmp").iterdir())
    assert cache.verify() == []


def test_unwritable_root_is_a_clear_error(tmp_path):
    from dask_staging import StagingError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StagingError, match="cannot create the cache root"):
        Cache(blocker / "cache")


def test_a_forked_child_can_use_its_parents_cache(put, cache_root):
    big = os.urandom(3 * MiB)
    first, second = put("f1", b"parent"), put("f2.bin", big)
    cache = Cache(cache_root, part_size=MiB)
    cache.get(first)  # thread pools, S3 client and index connections now exist
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_workers.get_in_forked_child, args=(cache, second, results))
    child.start()
    assert results.get(timeout=60) == sha(big)
    child.join(30)
    assert child.exitcode == 0
    assert read(cache.get(second)) == big


def test_prefixes_stage_every_object_under_them(put, bucket, cache_root):
    urls = [put(f"prefix/dir/{name}", name.encode()) for name in ("a", "b", "sub/c")]
    paths = Cache(cache_root).stage([f"s3://{bucket}/prefix/dir/"])
    assert sorted(paths) == sorted(urls)
    assert read(paths[urls[2]]) == b"sub/c"
    with pytest.raises(RemoteNotFoundError, match="no objects under"):
        Cache(cache_root).stage([f"s3://{bucket}/nothing-here/"])
