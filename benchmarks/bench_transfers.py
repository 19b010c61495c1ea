"""Stage-in throughput against MinIO, side by side with s5cmd and s3fs, in one run.

Run with the services up (``make bench`` does both)::

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_transfers.py [--rounds 3]

Every contender downloads into the same local file system; contenders take
turns within each round and the median of the rounds is reported, with the
ratio to s5cmd.  s5cmd runs as a subprocess (its
time includes its ~10 ms start-up); the cache is timed in-process.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import fsspec
import s3fs

from dask_staging import Cache

MiB = 1 << 20
ENDPOINT = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")
USER = os.environ.get("EXA_MINIO_USER", "exa-minio")
PASSWORD = os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret")
TOXIPROXY = os.environ.get("EXA_TOXIPROXY_API", "http://127.0.0.1:8474")
TOXIC_PORT = int(os.environ.get("EXA_TOXIC_S3_PORT", "9100"))
BUCKET = "exa-bench"
S5CMD = str(Path(sys.executable).with_name("s5cmd"))


def s5cmd(endpoint: str, *args: str) -> None:
    env = dict(
        os.environ, S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=USER, AWS_SECRET_ACCESS_KEY=PASSWORD
    )
    subprocess.run([S5CMD, "--log", "error", *args], check=True, env=env)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def prepare(fs: s3fs.S3FileSystem, work: Path) -> None:
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    if not fs.exists(f"{BUCKET}/big/1GiB.bin"):
        src = work / "src-big"
        with open(src, "wb") as f:
            for _ in range(1024):
                f.write(os.urandom(MiB))
        s5cmd(ENDPOINT, "cp", str(src), f"s3://{BUCKET}/big/1GiB.bin")
        src.unlink()
    if not fs.exists(f"{BUCKET}/mid/256MiB.bin"):
        src = work / "src-mid"
        src.write_bytes(os.urandom(256 * MiB))
        s5cmd(ENDPOINT, "cp", str(src), f"s3://{BUCKET}/mid/256MiB.bin")
        src.unlink()
    if len(fs.ls(f"{BUCKET}/small/", refresh=True) if fs.exists(f"{BUCKET}/small") else []) < 1000:
        src = work / "src-small"
        src.mkdir(exist_ok=True)
        for i in range(1000):
            (src / f"obj-{i:04d}").write_bytes(os.urandom(256 << 10))
        s5cmd(ENDPOINT, "cp", f"{src}/*", f"s3://{BUCKET}/small/")
        shutil.rmtree(src)


def toxic_proxy(latency_ms: int, rate_kbs: int) -> str:
    def call(method, path, body=None):
        req = urllib.request.Request(
            f"{TOXIPROXY}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.read()
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    call("DELETE", "/proxies/bench-s3")
    atexit.register(call, "DELETE", "/proxies/bench-s3")
    call(
        "POST",
        "/proxies",
        {
            "name": "bench-s3",
            "listen": f"127.0.0.1:{TOXIC_PORT}",
            "upstream": ENDPOINT.split("://")[1],
            "enabled": True,
        },
    )
    for toxic, attributes in (
        ("latency", {"latency": latency_ms}),
        ("bandwidth", {"rate": rate_kbs}),
    ):
        body = {"type": toxic, "stream": "downstream", "attributes": attributes}
        call("POST", "/proxies/bench-s3/toxics", body)
    return f"http://127.0.0.1:{TOXIC_PORT}"


def cache_once(work: Path, urls: list[str], endpoint: str, **kwargs) -> float:
    root = work / "cache"
    shutil.rmtree(root, ignore_errors=True)
    cache = Cache(root, s3={"endpoint_url": endpoint}, **kwargs)
    elapsed = timed(lambda: cache.stage(urls))
    assert cache.stats()["misses"] == len(urls)
    cache.close()
    shutil.rmtree(root)
    return elapsed


def s5cmd_once(work: Path, source: str, endpoint: str, *flags: str) -> float:
    out = work / "s5cmd-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    elapsed = timed(lambda: s5cmd(endpoint, *flags, "cp", source, f"{out}/"))
    shutil.rmtree(out)
    return elapsed


def s3fs_once(work: Path, path: str, endpoint: str, **kwargs) -> float:
    fs = s3fs.S3FileSystem(
        key=USER, secret=PASSWORD, endpoint_url=endpoint, skip_instance_cache=True
    )
    out = work / "s3fs-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    if path.endswith("/"):
        elapsed = timed(lambda: fs.get(path, f"{out}/", recursive=True))
    else:
        elapsed = timed(lambda: fs.get_file(path, str(out / "f"), **kwargs))
    shutil.rmtree(out)
    return elapsed


def interleaved(rounds: int, contenders: dict) -> dict[str, float]:
    """Median time of each contender, running them in turn within every round."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            times[name].append(fn())
    return {name: statistics.median(ts) for name, ts in times.items()}


def median_of(rounds: int, fn) -> float:
    return statistics.median(fn() for _ in range(rounds))


def bench_hit(work: Path) -> dict:
    root = work / "hit-cache"
    shutil.rmtree(root, ignore_errors=True)
    url = f"s3://{BUCKET}/mid/256MiB.bin"
    cache = Cache(root, s3={"endpoint_url": ENDPOINT})
    path = cache.get(url)
    staged = {"staged": {"root": str(root), "s3": {"endpoint_url": ENDPOINT}}}

    def read_all(f) -> None:
        while f.read(8 * MiB):
            pass

    def local() -> None:
        with open(path, "rb") as f:
            read_all(f)

    def through_staged() -> None:
        with fsspec.open(f"staged::{url}", **staged) as f:
            read_all(f)

    local()  # warm the page cache
    through_staged()
    t_local = median_of(7, lambda: timed(local))
    t_staged = median_of(7, lambda: timed(through_staged))
    latencies = []
    for _ in range(20000):
        start = time.perf_counter()
        cache.get(url)
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    cache.close()
    return {
        "local_read_GBps": 256 * MiB / t_local / 1e9,
        "staged_read_GBps": 256 * MiB / t_staged / 1e9,
        "staged_vs_local": t_local / t_staged,
        "get_hit_median_us": latencies[len(latencies) // 2] * 1e6,
        "get_hit_p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default=os.environ.get("BENCH_DIR"))
    args = parser.parse_args()
    os.environ.update(
        AWS_ACCESS_KEY_ID=USER,
        AWS_SECRET_ACCESS_KEY=PASSWORD,
        AWS_ENDPOINT_URL=ENDPOINT,
        AWS_REGION="us-east-1",
    )
    work = Path(args.work or tempfile.mkdtemp(prefix="exa-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    fs = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=ENDPOINT)
    prepare(fs, work)
    r = args.rounds
    results: dict[str, dict] = {}

    big = [f"s3://{BUCKET}/big/1GiB.bin"]
    gb = 1024 * MiB / 1e9
    t = interleaved(
        r,
        {
            "s5cmd": lambda: s5cmd_once(work, big[0], ENDPOINT),
            "dask_staging": lambda: cache_once(work, big, ENDPOINT),
            "s3fs get_file": lambda: s3fs_once(work, f"{BUCKET}/big/1GiB.bin", ENDPOINT),
        },
    )
    results["1 GiB object (GB/s)"] = {k: gb / v for k, v in t.items()}

    small = [f"s3://{BUCKET}/small/obj-{i:04d}" for i in range(1000)]
    t = interleaved(
        r,
        {
            "s5cmd": lambda: s5cmd_once(work, f"s3://{BUCKET}/small/*", ENDPOINT),
            "dask_staging": lambda: cache_once(work, small, ENDPOINT),
            "s3fs get": lambda: s3fs_once(work, f"{BUCKET}/small/", ENDPOINT),
        },
    )
    results["1000 x 256 KiB (objects/s)"] = {k: 1000 / v for k, v in t.items()}

    slow = toxic_proxy(latency_ms=10, rate_kbs=50_000)
    mid = [f"s3://{BUCKET}/mid/256MiB.bin"]
    mb = 256 * MiB / 1e6
    t = interleaved(
        r,
        {
            "s5cmd 16 streams": lambda: s5cmd_once_streams(work, mid[0], slow, 16),
            "dask_staging 16 streams": lambda: cache_once(
                work, mid, slow, streams=16, part_size=8 * MiB
            ),
        },
    )
    t["dask_staging 1 stream"] = cache_once(work, mid, slow, streams=1)  # ~5.5 s, once
    results["256 MiB via 10 ms / 50 MB/s per connection (MB/s)"] = {k: mb / v for k, v in t.items()}

    results["cache hit"] = bench_hit(work)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=1))
    for name, row in results.items():
        print(f"\n{name}")
        base = next(iter(row.values()))
        for k, v in row.items():
            ratio = f"  ({v / base:.2f}x first)" if "hit" not in name else ""
            print(f"  {k:28s} {v:10.3f}{ratio}")
    return 0


def s5cmd_once_streams(work: Path, source: str, endpoint: str, streams: int) -> float:
    out = work / "s5cmd-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    elapsed = timed(
        lambda: s5cmd(
            endpoint, "cp", "--concurrency", str(streams), "--part-size", "8", source, f"{out}/"
        )
    )
    shutil.rmtree(out)
    return elapsed


if __name__ == "__main__":
    sys.exit(main())
