"""Fault injection against a real cache: kill -9 at random moments, and many processes under load.

Used by ``tests/test_faults.py`` (small counts, assertions) and ``benchmarks/soak.py``
(large counts, figures for docs/reliability.md).  Every object's content is a pure
function of its key, so any reader can check what it got without a reference copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

MiB = 1 << 20


def content(key: str, size: int) -> bytes:
    """The bytes of object ``key``: its SHA-256 repeated (and cut) to ``size``."""
    block = hashlib.sha256(key.encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def seed(fs, bucket: str, sizes: dict[str, int]) -> dict[str, int]:
    """Write every ``{key: size}`` object to ``bucket``; returns ``{s3 url: size}``."""
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for key, size in sizes.items():
        fs.pipe(f"{bucket}/{key}", content(key, size))
    return {f"s3://{bucket}/{key}": size for key, size in sizes.items()}


def check_file(path: str, url: str, size: int) -> bool:
    with open(path, "rb") as f:
        return f.read() == content(url.split("/", 3)[3], size)


# A child process that stages, reads back and evicts until it is killed or done.
WORKER = r"""
import json, random, sys
sys.path.insert(0, sys.argv[4])
from faults import check_file
from dask_staging import Cache
from dask_staging.errors import CacheFullError
root, objects, seed = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
cache = Cache(root, max_bytes=int(sys.argv[5]), part_size=4 << 20, streams=4)
urls = list(objects)
for _ in range(int(sys.argv[6])):
    picked = rng.sample(urls, rng.randint(1, 4))
    try:
        staged = cache.stage(picked)
    except CacheFullError:  # several large objects at once can exceed the limit: allowed
        continue
    for url, path in staged.items():
        if not check_file(path, url, objects[url]):
            print(f"CORRUPT {url}", flush=True)
            sys.exit(3)
    if rng.random() < 0.5:  # keep the cache churning: every round downloads and evicts
        cache.evict(to_bytes=rng.randint(0, int(sys.argv[5]) // 2))
cache.close()
"""


def invariants(root: str, objects: dict[str, int]) -> dict:
    """Check a cache after crashes: repair what crashes may leave, then insist all agrees.

    Returns counts; raises AssertionError naming the first thing that is wrong.
    """
    from dask_staging import Cache

    cache = Cache(root)
    try:
        bad = cache.verify()
        assert bad == [], f"verify() found corrupt or missing copies: {bad[:5]}"
        entries = cache.entries()
        for entry in entries:
            path = str(Path(root, entry.path))
            assert check_file(path, entry.url, objects[entry.url]), f"wrong bytes: {entry.url}"
        orphans_before = len(cache._orphans({e.path for e in cache.index.entries()}, 0))
        cache.verify(remove=True, orphan_age=0)
        known = {Path(root, e.path) for e in cache.index.entries()}
        on_disk = set(Path(root, "data").glob("*/*"))
        assert on_disk == known, f"files without entries: {sorted(on_disk - known)[:5]}"
        temps = list(Path(root, "tmp").iterdir())
        assert temps == [], f"temp files left by dead processes: {temps[:5]}"
        verified_bytes = sum(e.size for e in entries)
        # the next request succeeds, with the right bytes
        for url, path in cache.stage(list(objects)).items():
            assert check_file(path, url, objects[url]), f"wrong bytes after recovery: {url}"
        return {"entries": len(entries), "orphans_removed": orphans_before, "bytes_verified":
                verified_bytes + sum(objects.values())}  # fmt: skip
    finally:
        cache.close()


def kill9_soak(root: str, objects: dict[str, int], *, rounds: int, seed: int = 1) -> dict:
    """``rounds`` children, each killed with SIGKILL at a random time or failpoint."""
    rng = random.Random(seed)
    here = str(Path(__file__).parent)
    max_bytes = sum(objects.values()) // 2
    modes = ["timer", "download", "publish", "evict"]
    killed = {mode: 0 for mode in modes}
    finished = 0
    start = time.monotonic()
    for i in range(rounds):
        mode = modes[i % len(modes)]
        env = dict(os.environ)
        env.pop("DASK_STAGING_FAILPOINTS", None)
        if mode != "timer":
            env["DASK_STAGING_FAILPOINTS"] = f"{mode}:{rng.randint(1, 4)}"
        iterations = "100000" if mode == "timer" else "40"  # the timer must find it working
        seed_arg = str(rng.randrange(1 << 30))
        argv = [sys.executable, "-c", WORKER, root, json.dumps(objects), seed_arg, here,
                str(max_bytes), iterations]  # fmt: skip
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        if mode == "timer":
            time.sleep(rng.uniform(0.3, 1.5))  # start-up is ~0.3 s: kill during the work
            proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
        assert "CORRUPT" not in out, f"a reader was served a partial file: {out.strip()}"
        if proc.returncode == -signal.SIGKILL:
            killed[mode] += 1
        else:
            assert proc.returncode == 0, f"worker failed with {proc.returncode}: {out[-500:]}"
            finished += 1
    checked = invariants(root, objects)
    return {
        "rounds": rounds,
        "killed": killed,
        "finished_before_the_kill": finished,
        "seconds": time.monotonic() - start,
        **checked,
    }


LOADER = r"""
import json, random, sys
sys.path.insert(0, sys.argv[4])
from faults import content
from dask_staging import Cache
root, objects, seed, gets = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
rng = random.Random(seed)
cache = Cache(root, max_bytes=int(sys.argv[6]))
urls, wrong = list(objects), 0
for _ in range(gets):
    url = rng.choice(urls)
    with cache.open(url) as f:
        if f.read() != content(url.split("/", 3)[3], objects[url]):
            wrong += 1
stats = cache.stats()
cache.close()
print(json.dumps({"wrong": wrong, "misses": stats["misses"], "hits": stats["hits"],
                  "bytes_staged": stats["bytes_staged"], "retries": stats["retries"]}))
"""


def load_soak(
    root: str, objects: dict[str, int], *, processes: int, gets: int, fraction=0.4
) -> dict:
    """``processes`` x ``gets`` random reads through one cache ``fraction`` the working set."""
    here = str(Path(__file__).parent)
    max_bytes = int(sum(objects.values()) * fraction)
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                LOADER,
                root,
                json.dumps(objects),
                str(i),
                here,
                str(gets),
                str(max_bytes),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"a loader failed: {out[-500:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    seconds = time.monotonic() - start
    wrong = sum(r["wrong"] for r in results)
    assert wrong == 0, f"{wrong} reads returned wrong bytes"
    checked = invariants(root, objects)
    return {
        "processes": processes,
        "gets": processes * gets,
        "objects": len(objects),
        "working_set_bytes": sum(objects.values()),
        "cache_bytes": max_bytes,
        "wrong_reads": wrong,
        "misses": sum(r["misses"] for r in results),
        "hits": sum(r["hits"] for r in results),
        "bytes_fetched": sum(r["bytes_staged"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "seconds": seconds,
        **checked,
    }


@contextlib.contextmanager
def throttled_minio(data_dir: str, user: str, password: str, max_requests: int = 2):
    """A second MinIO that answers 503 SlowDown beyond ``max_requests`` in flight."""
    import socket
    import urllib.request

    tools = os.environ.get("EXA_TOOLS", os.path.expanduser("~/.cache/exa-tools/bin"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MINIO_ROOT_USER=user, MINIO_ROOT_PASSWORD=password,
               MINIO_API_REQUESTS_MAX=str(max_requests), MINIO_API_REQUESTS_DEADLINE="20ms",
               MINIO_BROWSER="off", MINIO_PROMETHEUS_AUTH_TYPE="public")  # fmt: skip
    proc = subprocess.Popen(
        [os.path.join(tools, "minio"), "server", data_dir, "--quiet",
         "--address", f"127.0.0.1:{port}", "--console-address", "127.0.0.1:0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/minio/health/ready", timeout=1)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("the throttled MinIO did not start") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(30)


def get_requests(endpoint: str, metric: str = "minio_api_requests_total") -> int:
    """GetObject requests the MinIO at ``endpoint`` has served (its live v3 metrics);
    ``metric="minio_api_requests_errors_total"`` counts those it refused or failed."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"{endpoint}/minio/metrics/v3/api/requests", timeout=5) as r:
        text = r.read().decode()
    match = re.search(rf'^{metric}\{{name="GetObject"[^}}]*\}} (\S+)$', text, re.M)
    return int(float(match.group(1))) if match else 0


def stage_and_check(cache, objects: dict[str, int], endpoint: str | None = None) -> dict:
    """Stage ``objects`` through ``cache``; every byte must match; returns what it took
    (with ``endpoint``, the MinIO behind any proxy, also the GET requests it served)."""
    before = get_requests(endpoint) if endpoint else None
    paths = cache.stage(list(objects))
    for url, path in paths.items():
        assert check_file(path, url, objects[url]), f"wrong bytes: {url}"
    assert cache.verify() == []
    stats = cache.stats()
    out = {
        "objects": len(objects),
        "bytes_verified": sum(objects.values()),
        "retries": stats["retries"],
    }
    if endpoint:
        out["get_requests"] = get_requests(endpoint) - before
    return out
