"""One measured transfer, and the time and byte budget that every measurement runs under."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass
class Measurement:
    """The rate of one data path, one direction, one setting."""

    tier: str  # "s3", "db" or "fs"
    target: str  # endpoint and prefix, database (no password), or directory
    op: str  # "read" or "write"
    method: str  # e.g. "ranged GET", "COPY TO binary"
    bytes: int
    seconds: float
    streams: int = 1
    object_size: int | None = None
    objects: int = 1
    rows: int | None = None

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else float("inf")

    @property
    def objects_per_s(self) -> float:
        return self.objects / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict:
        return {**asdict(self), "mb_per_s": self.mb_per_s, "objects_per_s": self.objects_per_s}

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in fields})


class Budget:
    """Runs measurements until the time or byte budget is spent; records what it skipped."""

    def __init__(self, seconds: float, max_bytes: int, *, repeat: int = 1, progress: bool = False):
        self.deadline = time.monotonic() + seconds
        self.max_bytes = max_bytes
        self.repeat = max(1, repeat)
        self.moved = 0
        self.measurements: list[Measurement] = []
        self.skipped: list[dict] = []
        self._bar = None
        if progress:
            from tqdm import tqdm

            self._bar = tqdm(
                desc="bench", unit="B", unit_scale=True, file=sys.stderr, dynamic_ncols=True
            )

    def allows(self, what: str, nbytes: int) -> bool:
        """Whether a step moving ``nbytes`` fits; records the reason when it does not."""
        if time.monotonic() > self.deadline:
            self.skipped.append({"what": what, "reason": "time budget spent"})
            return False
        if self.moved + nbytes * self.repeat > self.max_bytes:
            self.skipped.append({"what": what, "reason": "byte budget spent"})
            return False
        return True

    def time(self, what: str, nbytes: int, fn: Callable[[], object]) -> float:
        """Median seconds of ``repeat`` calls of ``fn`` (which moves ``nbytes`` each)."""
        if self._bar is not None:
            self._bar.set_description(what)
        times = []
        for _ in range(self.repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
            self.moved += nbytes
            if self._bar is not None:
                self._bar.update(nbytes)
        return statistics.median(times)

    def measure(self, what: str, fn: Callable[[], object], **fields) -> Measurement | None:
        """Time ``fn`` if the budget allows and record it as a :class:`Measurement`."""
        if not self.allows(what, fields["bytes"]):
            return None
        seconds = self.time(what, fields["bytes"], fn)
        measurement = Measurement(seconds=seconds, **fields)
        self.measurements.append(measurement)
        return measurement

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
