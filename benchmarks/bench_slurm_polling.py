"""How much polling 50 deferred Slurm tasks cost the login node.

    scripts/services.sh up && eval "$(scripts/services.sh env)"
    .venv/bin/python benchmarks/bench_slurm_polling.py [--jobs 50] [--interval 1]

Fifty SlurmJobTriggers in one event loop (as in one triggerer) watch fifty
jobs; sshd's log counts the SSH logins, the JobWatcher counts status queries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

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
    print(
        json.dumps(
            {
                "jobs": args.jobs,
                "interval_s": args.interval,
                "seconds": seconds,
                "status_queries": polls,
                "ssh_logins": new_logins,
            }
        )
    )
    print(
        f"{args.jobs} deferred jobs watched for {seconds:.1f} s at a {args.interval} s interval: "
        f"{polls} status queries ({polls / max(seconds / args.interval, 1):.2f} per interval), "
        f"{new_logins} new SSH login(s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
