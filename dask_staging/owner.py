"""Who holds a download claim, and whether that holder is still alive.

An owner is ``host:pid:start`` where ``start`` is the process start time from
``/proc``, so a recycled pid is never mistaken for the original downloader.
On its own host a dead owner is recognised at once; owners on other hosts
(a cache index shared through PostgreSQL) are trusted until their lease ends.
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    """This node's name; ``DASK_STAGING_HOSTNAME`` overrides it (tests, containers)."""
    return os.environ.get("DASK_STAGING_HOSTNAME") or socket.gethostname()


def process_start(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it is not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:  # no /proc: fall back to signalling
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "?"
    # The command name (field 2) may contain spaces and parentheses.
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # zombie or dead: the process is gone
        return None
    return fields[19].decode()


def current_owner() -> str:
    pid = os.getpid()
    return f"{hostname()}:{pid}:{process_start(pid)}"


def parse(owner: str) -> tuple[str, int, str]:
    host, pid, start = owner.rsplit(":", 2)
    return host, int(pid), start


def alive(owner: str | None, lease_until: float | None, now: float) -> bool:
    """Whether the owner of a claim may still be working on it."""
    if not owner:
        return False
    host, pid, start = parse(owner)
    if host == hostname():
        running = process_start(pid)
        return running is not None and (running == start or "?" in (running, start))
    return lease_until is not None and lease_until > now
