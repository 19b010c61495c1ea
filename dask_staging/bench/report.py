"""The results of a benchmark as a table and as a plot of rate against streams and object size."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from dask.utils import format_bytes

from dask_staging.bench.budget import Measurement

TIERS = {"s3": "S3", "db": "database", "fs": "file system"}


def _rows(measurements: Iterable) -> list[Measurement]:
    return [m if isinstance(m, Measurement) else Measurement.from_dict(m) for m in measurements]


def table(measurements: Iterable) -> str:
    """A fixed-width table: one line per path, direction and setting."""
    header = ("tier", "target", "op", "method", "streams", "size", "MB/s", "objects/s")
    lines = [header]
    for m in _rows(measurements):
        size = format_bytes(m.object_size) if m.object_size else "-"
        if m.objects > 1:
            size = f"{m.objects} x {size}"
        lines.append(
            (
                TIERS.get(m.tier, m.tier),
                m.target,
                m.op,
                m.method,
                str(m.streams),
                size,
                f"{m.mb_per_s:,.1f}",
                f"{m.objects_per_s:,.1f}" if m.objects > 1 else "-",
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in lines
    )


def plot(measurements: Iterable, path: str, title: str = "") -> None:
    """A PNG: S3 rate vs streams (per object size), vs object size (per stream count), tiers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(measurements)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    single = [m for m in rows if m.tier == "s3" and m.objects == 1]
    several = len({m.target for m in single}) > 1
    for op, style in (("read", "-o"), ("write", "--s")):
        by_size = defaultdict(list)
        by_streams = defaultdict(list)
        for m in single:
            if m.op == op:
                by_size[(m.target, m.object_size)].append((m.streams, m.mb_per_s))
                by_streams[(m.target, m.streams)].append((m.object_size, m.mb_per_s))
        for (target, size), points in sorted(by_size.items()):
            xs, ys = zip(*sorted(points), strict=True)
            where = f" ({target})" if several else ""
            axes[0].plot(xs, ys, style, label=f"{op} {format_bytes(size)}{where}")
        for (target, streams), points in sorted(by_streams.items()):
            xs, ys = zip(*sorted(points), strict=True)
            where = f" ({target})" if several else ""
            axes[1].plot(xs, ys, style, label=f"{op}, {streams} streams{where}")
    axes[0].set(xscale="log", xlabel="streams", ylabel="MB/s", title="S3: rate vs streams")
    stream_counts = sorted({m.streams for m in single})
    if stream_counts:
        axes[0].set_xticks(stream_counts, [str(n) for n in stream_counts])
        axes[0].minorticks_off()
    axes[1].set(
        xscale="log", xlabel="object size (bytes)", ylabel="MB/s", title="S3: rate vs object size"
    )
    best: dict[tuple[str, str], float] = {}
    for m in rows:
        key = (TIERS.get(m.tier, m.tier) + (f"\n{m.target[-24:]}" if m.tier == "fs" else ""), m.op)
        best[key] = max(best.get(key, 0.0), m.mb_per_s)
    labels = sorted({k[0] for k in best})
    for offset, op in ((-0.2, "read"), (0.2, "write")):
        axes[2].bar(
            [i + offset for i in range(len(labels))],
            [best.get((label, op), 0.0) for label in labels],
            width=0.4,
            label=op,
        )
    axes[2].set_xticks(range(len(labels)), labels, fontsize=8)
    axes[2].set(yscale="log", ylabel="best MB/s", title="tiers: best measured rate")
    for ax in axes:
        if ax.has_data():
            ax.legend(fontsize=6, ncol=2 if several else 1)
        ax.grid(True, which="both", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
