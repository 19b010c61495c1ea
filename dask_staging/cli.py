"""``dask-staging``: stage, inspect and trim a node-local cache from the shell."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence

from dask.utils import format_bytes, parse_bytes
from fsspec.callbacks import NoOpCallback, TqdmCallback

from dask_staging.cache import Cache
from dask_staging.config import resolve_root
from dask_staging.errors import StagingError
from dask_staging.upload import stage_out

DESCRIPTION = """\
Stage remote objects (s3://bucket/key, any fsspec URL) into a local cache and
manage it.  Several processes on one node can share one cache root: each object
is downloaded once, into a temp file renamed into place when complete.

The cache root defaults to Dask's `staging.root` (env DASK_STAGING__ROOT).
S3 credentials and endpoint come from the standard AWS variables
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL).

examples:
  dask-staging stage s3://bucket/data/part-0.parquet s3://bucket/data/part-1.parquet
  dask-staging ls --json
  dask-staging evict --to-bytes 50GiB
  dask-staging out results/ s3://bucket/run-42/
  dask-staging query postgresql://me@db/prod "SELECT * FROM runs" --partition-on id --partitions 4
  dask-staging out results.parquet postgresql://me@db/prod --table summaries --mode create
  dask-staging bench --fs /scratch/$USER --s3 s3://bucket/tmp --dataset-size 200GiB --reads 3
"""

BENCH_DESCRIPTION = """\
Measure, from this machine, how fast each data path is, and advise whether to
read a dataset directly or to stage it first.

  file systems  sequential write (with fsync) and read of one file in --root
                and in every --fs directory (e.g. node-local disk, scratch)
  S3            PUT and ranged GET of test objects under a fresh key below --s3,
                for each --sizes and --streams (parts of size/streams, so that
                that many are in flight), and many small objects
  PostgreSQL    COPY TO, SELECT and stage_query out; COPY FROM and write_table in,
                on a table of --db-rows rows created and dropped by the run

Everything written is deleted afterwards.  The run stops starting new
measurements once --max-seconds or --max-bytes is spent, and lists what it
skipped.  Run it where the computation will run (a compute node: inside a Slurm
job or on a Dask worker) for numbers that matter.

examples:
  dask-staging bench --root /tmp/cache --fs /scratch/$USER
  dask-staging bench --s3 s3://bucket/tmp --streams 1,4,16,64 --sizes 1MiB,64MiB,1GiB \\
      --db postgresql://me@db/prod --dataset-size 500GiB --reads 4 \\
      --out bench.json --plot bench.png
"""


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 512MiB or 10GB)") from None


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=None, help="cache directory (default: %(default)s)")
    common.add_argument("--index-url", default=None, help="SQLAlchemy URL of a shared index")
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.set_defaults(root=None)

    parser = argparse.ArgumentParser(
        prog="dask-staging",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("stage", parents=[common], help="download URLs into the cache")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--streams", type=int, default=8, help="ranged GETs per object (default 8)")
    p.add_argument("--part-size", type=_size, default=16 << 20, help="bytes per ranged GET")
    p.add_argument("--max-bytes", type=_size, default=None, help="cache size limit")
    p.add_argument("--pin", action="store_true", help="pin the staged objects")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    sub.add_parser("ls", parents=[common], help="list cached entries, least recently used first")
    sub.add_parser("du", parents=[common], help="show the cache's size and counters")

    p = sub.add_parser("evict", parents=[common], help="remove entries (never pinned or open)")
    p.add_argument("url", nargs="?", metavar="URL", help="evict just this URL")
    p.add_argument("--to-bytes", type=_size, default=None, help="evict LRU entries to this size")

    p = sub.add_parser("pin", parents=[common], help="stage URL if needed and keep it cached")
    p.add_argument("url", metavar="URL")
    p = sub.add_parser("unpin", parents=[common], help="let URL be evicted again")
    p.add_argument("url", metavar="URL")

    p = sub.add_parser("verify", parents=[common], help="re-check sizes and checksums")
    p.add_argument("--remove", action="store_true", help="drop entries that fail the check")

    p = sub.add_parser(
        "query", parents=[common], help="stage a SQL query's result as Parquet, print its path"
    )
    p.add_argument("db_url", metavar="DB_URL", help="SQLAlchemy URL, e.g. postgresql://u@host/db")
    p.add_argument("sql", metavar="SQL")
    p.add_argument("--partition-on", help="numeric column to split the read on")
    p.add_argument("--partitions", type=int, default=None, help="connections / output files")
    p.add_argument("--ttl", type=float, default=None, help="re-run if older than this (seconds)")
    p.add_argument("--version-query", help="SQL whose value is part of the cache key")
    p.add_argument("--allow-empty", action="store_true", help="cache an empty result")

    p = sub.add_parser(
        "out", parents=[common], help="upload a file or directory to S3, or load it into a table"
    )
    p.add_argument("local", metavar="LOCAL")
    p.add_argument("url", metavar="URL", help="s3://bucket/prefix, or a database URL with --table")
    p.add_argument("--streams", type=int, default=8, help="parts in flight per file (default 8)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--table", help="target table when URL is a database")
    p.add_argument("--mode", choices=["append", "replace", "create"], default="append")
    p.add_argument("--writers", type=int, default=4, help="parallel database connections")
    p.add_argument("--batch-rows", type=int, default=None, help="rows per batch")

    p = sub.add_parser(
        "bench",
        parents=[common],
        help="measure file system, S3 and database rates here; advise stage vs direct",
        description=BENCH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--fs", action="append", default=[], metavar="DIR", help="also measure DIR")
    p.add_argument(
        "--s3", metavar="S3_PREFIX", help="s3://bucket/prefix to write test objects under"
    )
    p.add_argument("--db", metavar="DB_URL", help="PostgreSQL URL (password from PGPASSWORD)")
    p.add_argument("--streams", type=_ints, default=(1, 4, 16, 64), help="default 1,4,16,64")
    p.add_argument(
        "--sizes", type=_sizes, default=(1 << 20, 16 << 20, 256 << 20, 1 << 30),
        help="S3 object sizes (default 1MiB,16MiB,256MiB,1GiB)",
    )  # fmt: skip
    p.add_argument("--small-objects", type=int, default=200, help="count of small objects")
    p.add_argument("--small-size", type=_size, default=256 << 10, help="default 256KiB")
    p.add_argument("--db-rows", type=int, default=1_000_000, help="rows of the test table")
    p.add_argument("--fs-size", type=_size, default=1 << 30, help="file size (default 1GiB)")
    p.add_argument("--max-seconds", type=float, default=300, help="time budget (default 300)")
    p.add_argument("--max-bytes", type=_size, default=8 << 30, help="bytes moved (default 8GiB)")
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement (median)")
    p.add_argument("--dataset-size", type=_size, help="advise for a dataset of this size")
    p.add_argument("--reads", type=int, default=1, help="how many times it will be read")
    p.add_argument("--out", metavar="JSON", help="write the results to this JSON file")
    p.add_argument("--plot", metavar="PNG", help="plot the rates into this PNG file")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r} (try 1,4,16)") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"stream counts must be positive: {text!r}")
    return values


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(_size(x) for x in text.split(","))


def _progress(args) -> TqdmCallback | NoOpCallback:
    if args.no_progress or args.json:
        return NoOpCallback()
    return TqdmCallback(
        tqdm_kwargs={
            "unit": "B",
            "unit_scale": True,
            "unit_divisor": 1024,
            "desc": args.command,
            "file": sys.stderr,
            "dynamic_ncols": True,
        }
    )


def _entry_dict(entry) -> dict:
    return {
        "url": entry.url,
        "path": entry.path,
        "size": entry.size,
        "etag": entry.etag,
        "checksum": entry.checksum,
        "last_access": entry.last_access,
        "pinned": entry.pinned,
        "hits": entry.hits,
    }


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def run(args) -> int:
    if args.command == "out" and args.table:
        from dask_staging.sql import write_table

        rows = write_table(
            args.local,
            args.url,
            args.table,
            mode=args.mode,
            writers=args.writers,
            batch_rows=args.batch_rows,
        )
        _emit(args, {"rows": rows, "table": args.table}, f"wrote {rows} rows to {args.table}")
        return 0
    if args.command == "out":
        if "://" in args.url and not args.url.startswith(("s3", "gs", "file", "memory", "az")):
            raise ValueError(f"{args.url.split('://')[0]} looks like a database: add --table NAME")
        callback = _progress(args)
        stage_out(args.local, args.url, streams=args.streams, callback=callback)
        callback.close()
        _emit(args, {"uploaded": args.url}, f"uploaded {args.local} to {args.url}")
        return 0

    if args.command == "bench":
        return cmd_bench(args)
    kwargs = {"index_url": args.index_url}
    if args.command == "stage":
        kwargs.update(streams=args.streams, part_size=args.part_size, max_bytes=args.max_bytes)
    cache = Cache(resolve_root(args.root, 0), **kwargs)
    try:
        return COMMANDS[args.command](cache, args)
    finally:
        cache.close()


def cmd_stage(cache: Cache, args) -> int:
    callback = _progress(args)
    before = cache.stats()
    paths = cache.stage(args.urls, callback=callback)
    callback.close()
    if args.pin:
        for url in args.urls:
            cache.pin(url)
    after = cache.stats()
    staged = after["bytes_staged"] - before["bytes_staged"]
    summary = (
        f"{len(paths)} object(s) ready: {after['misses']} downloaded "
        f"({format_bytes(staged)}), {after['hits']} already cached"
    )
    _emit(args, {"paths": paths, "downloaded": after["misses"], "bytes": staged}, summary)
    if not args.json:
        for url, path in paths.items():
            print(f"{url}\t{path}")
    return 0


def cmd_ls(cache: Cache, args) -> int:
    entries = cache.entries()
    if args.json:
        print(json.dumps([_entry_dict(e) for e in entries], indent=1))
        return 0
    for e in entries:
        pin = "pinned" if e.pinned else "-"
        print(f"{format_bytes(e.size):>10}  {_when(e.last_access)}  {pin:6}  {e.hits:>6}  {e.url}")
    return 0


def cmd_du(cache: Cache, args) -> int:
    stats = cache.stats()
    limit = format_bytes(stats["max_bytes"]) if stats["max_bytes"] else "no limit"
    text = (
        f"{format_bytes(stats['bytes_cached'])} in {stats['entries']} entries "
        f"({format_bytes(stats['bytes_pinned'])} pinned; limit {limit}) at {stats['root']}"
    )
    _emit(args, stats, text)
    return 0


def cmd_evict(cache: Cache, args) -> int:
    freed = cache.evict(args.url, to_bytes=args.to_bytes)
    _emit(args, {"freed": freed}, f"freed {format_bytes(freed)}")
    return 0


def cmd_pin(cache: Cache, args) -> int:
    cache.pin(args.url)
    _emit(args, {"pinned": args.url}, f"pinned {args.url}")
    return 0


def cmd_unpin(cache: Cache, args) -> int:
    cache.unpin(args.url)
    _emit(args, {"unpinned": args.url}, f"unpinned {args.url}")
    return 0


def cmd_verify(cache: Cache, args) -> int:
    bad = cache.verify(remove=args.remove)
    if args.json:
        print(json.dumps({"failed": bad}))
    else:
        for url in bad:
            print(f"FAILED {url}")
    if bad:
        action = "removed" if args.remove else "found"
        print(f"dask-staging: {len(bad)} corrupt or missing entries {action}", file=sys.stderr)
        return 1
    if not args.json:
        print("all entries verified")
    return 0


def cmd_query(cache: Cache, args) -> int:
    path = cache.stage_query(
        args.db_url,
        args.sql,
        partition_on=args.partition_on,
        partitions=args.partitions,
        ttl=args.ttl,
        version_query=args.version_query,
        allow_empty=args.allow_empty,
    )
    _emit(args, {"path": path}, path)
    return 0


COMMANDS = {
    "query": cmd_query,
    "stage": cmd_stage,
    "ls": cmd_ls,
    "du": cmd_du,
    "evict": cmd_evict,
    "pin": cmd_pin,
    "unpin": cmd_unpin,
    "verify": cmd_verify,
}


def cmd_bench(args) -> int:
    from dask_staging.bench import run_and_advise
    from dask_staging.bench.report import plot, table

    results = run_and_advise(
        root=resolve_root(args.root, 0),
        dataset_bytes=args.dataset_size,
        reads=args.reads,
        fs=args.fs,
        s3=args.s3,
        db=args.db,
        sizes=args.sizes,
        streams=args.streams,
        small_objects=args.small_objects,
        small_size=args.small_size,
        db_rows=args.db_rows,
        fs_size=args.fs_size,
        max_seconds=args.max_seconds,
        max_bytes=args.max_bytes,
        repeat=args.repeat,
        progress=not (args.no_progress or args.json),
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    if args.plot:
        plot(results["measurements"], args.plot, title=f"dask-staging bench on {results['host']}")
    if args.json:
        print(json.dumps(results))
        return 0
    print(table(results["measurements"]))
    for skipped in results["skipped"]:
        print(f"skipped: {skipped['what']} ({skipped['reason']})")
    for text in results.get("advice", {}).get("text", []):
        print()
        print(text)
    return 0


def _emit(args, data, text: str) -> None:
    print(json.dumps(data, default=str) if args.json else text)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("dask-staging: interrupted", file=sys.stderr)
        return 130
    except (StagingError, OSError, ValueError) as exc:
        print(f"dask-staging: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
