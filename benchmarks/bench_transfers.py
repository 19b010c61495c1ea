"""S3 stage-in and stage-out against MinIO, side by side with the tools people use today.

Run with the services up (``make bench`` does both)::

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_transfers.py [--rounds 3]

Contenders: dask_staging (``Cache.stage``, ``stage_out``), s5cmd (a subprocess,
so its time includes its ~10 ms start-up), s3fs, fsspec ``simplecache::`` and
boto3's TransferManager, each with its defaults unless a scenario sets the
stream count.  They download into the same local file system, take turns
within each round, and the median of the rounds is reported as a ratio to
s5cmd.  Results go to benchmarks/results/transfers.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec
import s3fs

from dask_staging import Cache, stage_out

sys.path.insert(0, str(Path(__file__).parent))
import links
from results import Results, interleaved, timed

MiB = 1 << 20
ENDPOINT = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")
USER = os.environ.get("EXA_MINIO_USER", "exa-minio")
PASSWORD = os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret")
BUCKET = "exa-bench"
S5CMD = str(Path(sys.executable).with_name("s5cmd"))


def s5cmd(endpoint: str, *args: str) -> None:
    env = dict(
        os.environ, S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=USER, AWS_SECRET_ACCESS_KEY=PASSWORD
    )
    subprocess.run([S5CMD, "--log", "error", *args], check=True, env=env)


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


def cache_once(work: Path, urls: list[str], endpoint: str, **kwargs) -> float:
    root = work / "cache"
    shutil.rmtree(root, ignore_errors=True)
    cache = Cache(root, s3={"endpoint_url": endpoint}, **kwargs)
    elapsed = timed(lambda: cache.stage(urls))
    assert cache.stats()["misses"] == len(urls)
    cache.close()
    shutil.rmtree(root)
    return elapsed


def fresh_dir(work: Path, name: str) -> Path:
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    return out


def s5cmd_once(work: Path, source: str, endpoint: str, *flags: str) -> float:
    out = fresh_dir(work, "s5cmd-out")
    elapsed = timed(lambda: s5cmd(endpoint, "cp", *flags, source, f"{out}/"))
    shutil.rmtree(out)
    return elapsed


def s3fs_options(endpoint: str, streams: int | None) -> dict:
    options = {"key": USER, "secret": PASSWORD, "endpoint_url": endpoint}
    if streams is not None:  # concurrent range requests per file (s3fs's max_concurrency)
        options["max_concurrency"] = streams
    return options


def s3fs_once(work: Path, path: str, endpoint: str, streams: int | None = None) -> float:
    fs = s3fs.S3FileSystem(**s3fs_options(endpoint, streams), skip_instance_cache=True)
    out = fresh_dir(work, "s3fs-out")
    if path.endswith("/"):
        elapsed = timed(lambda: fs.get(path, f"{out}/", recursive=True))
    else:
        elapsed = timed(lambda: fs.get_file(path, str(out / "f")))
    shutil.rmtree(out)
    return elapsed


def simplecache_once(
    work: Path, paths: list[str], endpoint: str, streams: int | None = None
) -> float:
    """fsspec's whole-file cache: opening a path downloads it into cache_storage."""
    storage = fresh_dir(work, "simplecache")
    fs = fsspec.filesystem(
        "simplecache",
        target_protocol="s3",
        target_options={**s3fs_options(endpoint, streams), "skip_instance_cache": True},
        cache_storage=str(storage),
        skip_instance_cache=True,
    )

    def fetch():
        for path in paths:
            with fs.open(path, "rb"):
                pass

    elapsed = timed(fetch)
    shutil.rmtree(storage)
    return elapsed


def boto3_client(endpoint: str, streams: int = 10):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=USER,
        aws_secret_access_key=PASSWORD,
        region_name="us-east-1",
        config=Config(max_pool_connections=max(streams, 10)),
    )


def boto3_config(streams: int | None):
    from boto3.s3.transfer import TransferConfig

    return (
        TransferConfig()
        if streams is None
        else TransferConfig(max_concurrency=streams, multipart_chunksize=8 * MiB)
    )


def boto3_once(work: Path, keys: list[str], endpoint: str, streams: int | None = None) -> float:
    """boto3's TransferManager (the engine of ``download_file``), all keys submitted at once."""
    from boto3.s3.transfer import create_transfer_manager

    client = boto3_client(endpoint, streams or 10)
    out = fresh_dir(work, "boto3-out")

    def fetch():
        with create_transfer_manager(client, boto3_config(streams)) as manager:
            futures = [
                manager.download(BUCKET, key, str(out / f"{i}")) for i, key in enumerate(keys)
            ]
            for future in futures:
                future.result()

    elapsed = timed(fetch)
    shutil.rmtree(out)
    return elapsed


# -- stage-out ------------------------------------------------------------------------


def upload_sources(work: Path) -> tuple[Path, Path]:
    big = work / "up-big.bin"
    if not big.exists():
        with open(big, "wb") as f:
            for _ in range(1024):
                f.write(os.urandom(MiB))
    small = work / "up-small"
    if not small.exists():
        small.mkdir()
        for i in range(1000):
            (small / f"obj-{i:04d}").write_bytes(os.urandom(256 << 10))
    return big, small


def boto3_upload(paths: list[Path], keys: list[str]) -> float:
    from boto3.s3.transfer import create_transfer_manager

    client = boto3_client(ENDPOINT)

    def send():
        with create_transfer_manager(client, boto3_config(None)) as manager:
            futures = [manager.upload(str(p), BUCKET, k) for p, k in zip(paths, keys, strict=True)]
            for future in futures:
                future.result()

    return timed(send)


def bench_stage_out(work: Path, rounds: int, results: Results) -> None:
    big, small = upload_sources(work)
    fs = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=ENDPOINT)
    files = sorted(small.iterdir())
    t = interleaved(
        rounds,
        {
            "s5cmd": lambda: timed(
                lambda: s5cmd(ENDPOINT, "cp", str(big), f"s3://{BUCKET}/out/s5cmd.bin")
            ),
            "dask_staging stage_out": lambda: timed(
                lambda: stage_out(big, f"s3://{BUCKET}/out/ds.bin")
            ),
            "s3fs put_file": lambda: timed(lambda: fs.put_file(str(big), f"{BUCKET}/out/s3fs.bin")),
            "boto3 TransferManager": lambda: boto3_upload([big], ["out/boto3.bin"]),
        },
    )
    gb = 1024 * MiB / 1e9
    results.scenario(
        "out-large",
        "Stage-out: one 1 GiB file (multipart)",
        [{"contender": k, "gbps": gb / v} for k, v in t.items()],
        value="gbps",
        unit="GB/s",
        baseline="s5cmd",
        target="≥ 1.0× s5cmd",
    )
    t = interleaved(
        rounds,
        {
            "s5cmd": lambda: timed(
                lambda: s5cmd(ENDPOINT, "cp", f"{small}/*", f"s3://{BUCKET}/out-small/s5cmd/")
            ),
            "dask_staging stage_out": lambda: timed(
                lambda: stage_out(small, f"s3://{BUCKET}/out-small/ds/")
            ),
            "s3fs put": lambda: timed(
                lambda: fs.put(f"{small}/", f"{BUCKET}/out-small/s3fs/", recursive=True)
            ),
            "boto3 TransferManager": lambda: boto3_upload(
                files, [f"out-small/boto3/{p.name}" for p in files]
            ),
        },
    )
    results.scenario(
        "out-small",
        "Stage-out: 1,000 files of 256 KiB",
        [{"contender": k, "objects_per_s": 1000 / v} for k, v in t.items()],
        value="objects_per_s",
        unit="objects/s",
        baseline="s5cmd",
        target="≥ 1.0× s5cmd",
    )


# -- cache hits -----------------------------------------------------------------------


def median_of(rounds: int, fn) -> float:
    import statistics

    return statistics.median(fn() for _ in range(rounds))


def bench_hit(work: Path, results: Results) -> None:
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
    t = interleaved(
        7,
        {
            "open() on the local file": lambda: timed(local),
            "staged::s3:// (cache hit)": lambda: timed(through_staged),
        },
    )
    results.scenario(
        "hit-read",
        "Cache hit: reading a cached 256 MiB object",
        [{"contender": k, "gbps": 256 * MiB / v / 1e9} for k, v in t.items()],
        value="gbps",
        unit="GB/s",
        baseline="open() on the local file",
        target="≥ 0.9× a local read",
    )
    latencies = []
    for _ in range(20000):
        start = time.perf_counter()
        cache.get(url)
        latencies.append((time.perf_counter() - start) * 1e6)
    latencies.sort()
    cache.close()
    results.scenario(
        "hit-latency",
        "Cache hit: latency of Cache.get (20,000 calls)",
        [
            {"contender": "Cache.get, median", "us": latencies[len(latencies) // 2]},
            {"contender": "Cache.get, p99", "us": latencies[int(len(latencies) * 0.99)]},
        ],
        value="us",
        unit="µs",
        higher_is_better=False,
        target="median ≤ 200 µs",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default=os.environ.get("BENCH_DIR"))
    args = parser.parse_args()
    links.use_minio()
    work = Path(args.work or tempfile.mkdtemp(prefix="exa-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    fs = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=ENDPOINT)
    prepare(fs, work)
    r = args.rounds
    results = Results(
        "transfers",
        "S3 stage-in and stage-out (`benchmarks/bench_transfers.py`)\n"
        "Against MinIO on loopback, and through toxiproxy emulating a WAN link. dask_staging is "
        "timed in-process with its defaults (`streams=8`, `part_size=16 MiB`, `transfers=64`); its "
        "times include the index writes, the temp-then-rename publish and the checksum. s5cmd runs "
        "as a subprocess (its times include its ~10 ms start-up). Medians of "
        f"{r} interleaved rounds.",
    )

    gb = 1024 * MiB / 1e9
    t = interleaved(
        r,
        {
            "s5cmd": lambda: s5cmd_once(work, f"s3://{BUCKET}/big/1GiB.bin", ENDPOINT),
            "dask_staging": lambda: cache_once(work, [f"s3://{BUCKET}/big/1GiB.bin"], ENDPOINT),
            "s3fs get_file": lambda: s3fs_once(work, f"{BUCKET}/big/1GiB.bin", ENDPOINT),
            "fsspec simplecache::": lambda: simplecache_once(
                work, [f"{BUCKET}/big/1GiB.bin"], ENDPOINT
            ),
            "boto3 TransferManager": lambda: boto3_once(work, ["big/1GiB.bin"], ENDPOINT),
        },
    )
    results.scenario(
        "large",
        "Stage-in: one 1 GiB object, loopback",
        [{"contender": k, "gbps": gb / v} for k, v in t.items()],
        value="gbps",
        unit="GB/s",
        baseline="s5cmd",
        target="dask_staging ≥ 1.0× s5cmd",
    )

    keys = [f"small/obj-{i:04d}" for i in range(1000)]
    t = interleaved(
        r,
        {
            "s5cmd": lambda: s5cmd_once(work, f"s3://{BUCKET}/small/*", ENDPOINT),
            "dask_staging": lambda: cache_once(
                work, [f"s3://{BUCKET}/{k}" for k in keys], ENDPOINT
            ),
            "s3fs get (recursive)": lambda: s3fs_once(work, f"{BUCKET}/small/", ENDPOINT),
            "fsspec simplecache::": lambda: simplecache_once(
                work, [f"{BUCKET}/{k}" for k in keys], ENDPOINT
            ),
            "boto3 TransferManager": lambda: boto3_once(work, keys, ENDPOINT),
        },
    )
    results.scenario(
        "small",
        "Stage-in: 1,000 objects of 256 KiB, loopback",
        [{"contender": k, "objects_per_s": 1000 / v} for k, v in t.items()],
        value="objects_per_s",
        unit="objects/s",
        baseline="s5cmd",
        target="dask_staging ≥ 1.0× s5cmd",
    )

    slow = links.wan(latency_ms=10, rate_kbs=50_000)
    mid = f"s3://{BUCKET}/mid/256MiB.bin"
    mb = 256 * MiB / 1e6
    wan_rounds = max(1, min(r, 3))
    for streams in (1, 4, 16):
        contenders = {
            "s5cmd": lambda n=streams: s5cmd_once(
                work, mid, slow, "--concurrency", str(n), "--part-size", "8"
            ),
            "dask_staging": lambda n=streams: cache_once(
                work, [mid], slow, streams=n, part_size=8 * MiB
            ),
            "boto3 TransferManager": lambda n=streams: boto3_once(
                work, ["mid/256MiB.bin"], slow, n
            ),
        }
        contenders["s3fs get_file"] = lambda n=streams: s3fs_once(work, mid[5:], slow, n)
        contenders["fsspec simplecache::"] = lambda n=streams: simplecache_once(
            work, [mid[5:]], slow, n
        )
        t = interleaved(wan_rounds, contenders)
        results.scenario(
            f"wan-{streams}",
            f"Stage-in through a WAN-like link (10 ms, 50 MB/s per connection): "
            f"256 MiB, {streams} stream{'s' if streams > 1 else ''} each",
            [{"contender": k, "mbps": mb / v} for k, v in t.items()],
            value="mbps",
            unit="MB/s",
            baseline="s5cmd",
            target="dask_staging ≥ 1.0× s5cmd; 16 streams ≥ 5× one stream" if streams == 16 else "",
            note=f"Median of {wan_rounds} rounds.",
        )

    bench_stage_out(work, r, results)
    bench_hit(work, results)
    shutil.rmtree(work, ignore_errors=True)
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
