"""Results of one benchmark script: scenarios with their figures, the command, the machine.

Every script writes ``benchmarks/results/<name>.json`` through :class:`Results`;
``benchmarks/report.py`` turns all of them into ``docs/benchmarks.md`` and one
plot per scenario, so no figure in the docs is typed by hand.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"


def machine() -> dict:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def command() -> str:
    """The command line that produced these results, relative to the repository."""
    script = os.path.relpath(sys.argv[0], HERE.parent)
    return shlex.join([".venv/bin/python", script, *sys.argv[1:]])


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(rounds: int, contenders: dict) -> dict[str, float]:
    """Median seconds of each contender, run in turn within every round (noise hits all)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            times[name].append(fn())
    return {name: statistics.median(ts) for name, ts in times.items()}


class Results:
    """Collects scenarios and writes them as JSON.

    Each scenario is a table: rows of ``{"contender": name, <column>: value, ...}``
    with one ``value`` column compared against the ``baseline`` contender.
    """

    def __init__(self, name: str, about: str):
        self.data = {
            "name": name,
            "about": about,
            "command": command(),
            "machine": machine(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "scenarios": [],
        }

    def scenario(
        self,
        key: str,
        title: str,
        rows: list[dict],
        *,
        value: str,
        unit: str,
        baseline: str | None = None,
        higher_is_better: bool = True,
        note: str = "",
        target: str = "",
        columns: dict[str, str] | None = None,
    ) -> dict:
        """Add one table; ``ratio`` (value / baseline value) is computed for every row.

        ``columns`` names further fields of the rows to show (``{"rss_mib": "peak RSS (MiB)"}``);
        ``target`` states what the result must reach, checked against the figures by hand
        of nobody: the report prints it next to the measured ratio.
        """
        base = next((r[value] for r in rows if r["contender"] == baseline), None)
        for row in rows:
            if base:
                row["ratio"] = row[value] / base
        entry = {
            "key": key,
            "title": title,
            "value": value,
            "unit": unit,
            "baseline": baseline,
            "higher_is_better": higher_is_better,
            "note": note,
            "target": target,
            "columns": columns or {},
            "rows": rows,
        }
        self.data["scenarios"].append(entry)
        return entry

    def save(self) -> Path:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.data['name']}.json"
        path.write_text(json.dumps(self.data, indent=1) + "\n")
        for scenario in self.data["scenarios"]:
            print(f"\n{scenario['title']} ({scenario['unit']})")
            for row in scenario["rows"]:
                ratio = f"  {row['ratio']:.2f}x" if "ratio" in row else ""
                print(f"  {row['contender']:40s} {row[scenario['value']]:12.3f}{ratio}")
        print(f"\nwrote {os.path.relpath(path)}")
        return path
