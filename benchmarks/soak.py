"""Reliability soak: the fault-injection scenarios of tests/test_faults.py, at scale.

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/soak.py [--rounds 200] [--gets 1000]

Writes benchmarks/results/reliability.json; ``benchmarks/report.py`` turns it
into the figures of docs/reliability.md.  Any lost or wrong byte stops the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import s3fs

sys.path.insert(0, str(Path(__file__).parent))
import faults
import links
from results import RESULTS, command, machine

from dask_staging import Cache

ENDPOINT = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")
USER = os.environ.get("EXA_MINIO_USER", "exa-minio")
PASSWORD = os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret")
MiB = 1 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="kill -9 rounds")
    parser.add_argument("--gets", type=int, default=1000, help="reads per process under load")
    args = parser.parse_args()
    links.use_minio()
    fs = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=ENDPOINT)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="exa-soak-") as work:
        sizes = {f"small/{i:03d}": (32 << 10) * (1 + i % 8) for i in range(24)}
        sizes.update({f"large/{i:02d}": (5 + i % 4) * MiB + 12345 for i in range(8)})
        objects = faults.seed(fs, "exa-soak-kill", sizes)
        print(f"kill -9: {args.rounds} rounds", flush=True)
        figures["kill9"] = faults.kill9_soak(f"{work}/kill", objects, rounds=args.rounds, seed=11)

        objects = faults.seed(
            fs, "exa-soak-load", {f"obj/{i:03d}": (16 << 10) * (1 + i % 16) for i in range(200)}
        )
        print(f"load: 8 processes x {args.gets} gets", flush=True)
        figures["load"] = faults.load_soak(f"{work}/load", objects, processes=8, gets=args.gets)

        objects = faults.seed(fs, "exa-soak-reset", {f"r/{i:02d}": 6 * MiB + i for i in range(12)})
        print("connection resets", flush=True)
        link = links.link("soak", {"limit_data": {"bytes": 3 * MiB // 2}})  # cut after 1.5 MiB
        start = time.monotonic()
        cache = Cache(
            f"{work}/reset", part_size=MiB, streams=4, retries=60, s3={"endpoint_url": link}
        )
        figures["resets"] = {
            "parts": sum(-(-size // MiB) for size in objects.values()),
            **faults.stage_and_check(cache, objects, ENDPOINT),
            "seconds": time.monotonic() - start,
        }
        cache.close()
        links.remove("soak")

        print("503 SlowDown throttling", flush=True)
        with faults.throttled_minio(f"{work}/throttled-data", USER, PASSWORD, 1) as endpoint:
            throttled = s3fs.S3FileSystem(key=USER, secret=PASSWORD, endpoint_url=endpoint)
            spec = {f"t/{i:02d}": (1 + i % 3) * MiB for i in range(30)}
            for attempt in range(100):
                try:
                    objects = faults.seed(throttled, "throttled", spec)
                    break
                except Exception:
                    time.sleep(0.05 * attempt)
            start = time.monotonic()
            cache = Cache(
                f"{work}/throttled",
                part_size=MiB,
                streams=8,
                retries=30,
                s3={"endpoint_url": endpoint},
            )
            refused = faults.get_requests(endpoint, "minio_api_requests_errors_total")
            figures["throttling"] = {
                **faults.stage_and_check(cache, objects),
                "seconds": time.monotonic() - start,
                "refused": faults.get_requests(endpoint, "minio_api_requests_errors_total")
                - refused,
            }
            cache.close()
    result = {
        "name": "reliability",
        "command": command(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "figures": figures,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reliability.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
