"""How much polling 50 deferred Slurm tasks cost the login node.

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_slurm_polling.py [--jobs 50] [--interval 1]

Fifty SlurmJobTriggers in one event loop (as in one triggerer) watch fifty
jobs; sshd's log counts the SSH logins, the JobWatcher counts status queries.
Results go to benchmarks/results/slurm_polling.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import Results

CONN = {
    "conn_type": "slurm",
    "host": os.environ.get("EXA_SSH_HOST", "127.0.0.1"),
    "port": int(os.environ.get("EXA_SSH_PORT", "2222")),
    "login": os.environ.get("EXA_SSH_USER", "root"),
    "extra": {
        "key_file": os.environ.get("EXA_SSH_KEY"),
        "known_hosts": os.environ.get("EXA_SSH_KNOWN_HOSTS"),
    },
}


def logins() -> int:
    log = os.path.join(os.path.dirname(os.environ["EXA_SSH_KEY"]), "sshd.log")
    with open(log) as f:
        return f.read().count("Accepted publickey")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=int, default=10, help="how long each job sleeps")
    args = parser.parse_args()
    os.environ["AIRFLOW_CONN_SLURM_BENCH"] = json.dumps(CONN)

    from airflow_exa_provider.hooks.slurm import SlurmHook
    from airflow_exa_provider.triggers.slurm import JobWatcher, SlurmJobTrigger

    hook = SlurmHook("slurm_bench")
    jobs = [
        hook.submit(command=f"sleep {args.seconds}", options={"mem": "16M"})
        for _ in range(args.jobs)
    ]

    async def watch() -> tuple[float, int, int]:
        before = logins()
        start = time.monotonic()
        triggers = [SlurmJobTrigger(j, "slurm_bench", args.interval) for j in jobs]
        await asyncio.gather(*(anext(t.run()) for t in triggers))
        watcher = next(iter(JobWatcher._watchers.values()))
        return time.monotonic() - start, watcher.polls, logins() - before

    seconds, polls, new_logins = asyncio.run(watch())
    intervals = max(seconds / args.interval, 1)
    results = Results(
        "slurm_polling",
        f"Polling cost of deferred Slurm tasks (`benchmarks/bench_slurm_polling.py`)\n"
        f"{args.jobs} `SlurmJobTrigger`s in one event loop, as one triggerer holds them, watch "
        f"{args.jobs} jobs of `sleep {args.seconds}` on the single-node Slurm (which runs as many "
        "at a time as it has CPUs). sshd's own log counts the logins; the shared `JobWatcher` "
        f"counts the status queries. The run took {seconds:.0f} s.",
    )
    results.scenario(
        "queries",
        f"Status queries per {args.interval:g} s poll interval, all {args.jobs} jobs",
        [
            {"contender": "shared JobWatcher (one batched query)",
             "per_interval": polls / intervals, "total": polls, "logins": new_logins},
            {"contender": "a trigger that polls on its own (jobs × intervals)",
             "per_interval": float(args.jobs), "total": args.jobs * intervals, "logins": None},
        ],
        value="per_interval",
        unit="queries per interval",
        higher_is_better=False,
        columns={"total": "queries in the run", "logins": "new SSH logins"},
        target="≤ 1 status query per interval per login node; ≤ 1 connection per login node",
    )  # fmt: skip
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
