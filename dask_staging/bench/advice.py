"""Stage or read directly?  Expected times for a dataset, from measured rates."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dask.utils import format_bytes, format_time

from dask_staging.bench.budget import Measurement

# How an application reads each source when it does not stage: one stream per file for
# S3 (the largest objects measured), a driver's cursor for the database.
DIRECT = {"s3": ("ranged GET", 1), "db": ("SELECT (server-side cursor)", None)}
# How staging reads it: the fastest measured S3 setting; stage_query for the database.
STAGE = {"s3": ("ranged GET", None), "db": ("stage_query → Parquet", None)}


@dataclass(frozen=True)
class Advice:
    """What to do with one source, and why."""

    source: str
    stage: bool
    direct_seconds: float
    staged_seconds: float
    direct_mb_per_s: float
    stage_mb_per_s: float
    local_mb_per_s: float
    break_even_reads: float | None  # reads from which staging is faster (None: never)

    def text(self, dataset_bytes: int, reads: int) -> str:
        verdict = "stage" if self.stage else "read directly"
        size = format_bytes(dataset_bytes)
        times = "once" if reads == 1 else f"{reads} times"
        lines = [
            f"{self.source}: {verdict}.",
            f"  reading {size} {times} directly: {format_time(self.direct_seconds)} "
            f"at {self.direct_mb_per_s:,.0f} MB/s",
            f"  staging it, then reading the local copy: {format_time(self.staged_seconds)} "
            f"(stage-in at {self.stage_mb_per_s:,.0f} MB/s, local reads at "
            f"{self.local_mb_per_s:,.0f} MB/s)",
        ]
        if self.break_even_reads is not None:
            lines.append(f"  staging pays off from read {_reads(self.break_even_reads)} on")
        return "\n".join(lines)


def _reads(value: float) -> int:
    """The first whole number of reads above the break-even point."""
    return int(value) + 1


def _best(measurements: Iterable[Measurement], tier: str, op: str, method: str, streams=None):
    rows = [
        m
        for m in measurements
        if m.tier == tier
        and m.op == op
        and m.method == method
        and m.objects == 1
        and (streams is None or m.streams == streams)
    ]
    if not rows:
        return None
    largest = max(m.object_size or m.bytes for m in rows)
    return max(m.mb_per_s for m in rows if (m.object_size or m.bytes) == largest)


def advise(
    measurements: Iterable, dataset_bytes: int, reads: int, *, local: str | None = None
) -> list[Advice]:
    """Advice for every measured source (S3, database), given a dataset read ``reads`` times.

    Direct reading costs ``reads x size / direct rate``.  Staging costs one
    ``size / stage-in rate`` plus ``reads x size / local read rate``, where the
    local rate is the fastest file system read measured.
    """
    if dataset_bytes <= 0 or reads <= 0:
        raise ValueError("the dataset size and the number of reads must be positive")
    rows = [m if isinstance(m, Measurement) else Measurement.from_dict(m) for m in measurements]
    reads_fs = [m for m in rows if m.tier == "fs" and m.op == "read"]
    if local is not None:
        reads_fs = [m for m in reads_fs if m.target == local] or reads_fs
    local_rate = max((m.mb_per_s for m in reads_fs), default=None)
    if local_rate is None:
        raise ValueError("advice needs a file system read rate: measure at least one --fs path")
    out = []
    mb = dataset_bytes / 1e6
    for tier, label in (("s3", "S3"), ("db", "database")):
        direct = _best(rows, tier, "read", *DIRECT[tier])
        stage = _best(rows, tier, "read", *STAGE[tier])
        if direct is None or stage is None:
            continue
        direct_s = reads * mb / direct
        staged_s = mb / stage + reads * mb / local_rate
        saving_per_read = 1 / direct - 1 / local_rate
        break_even = (1 / stage) / saving_per_read if saving_per_read > 0 else None
        out.append(
            Advice(
                label,
                staged_s < direct_s,
                direct_s,
                staged_s,
                direct,
                stage,
                local_rate,
                break_even,
            )
        )
    return out
