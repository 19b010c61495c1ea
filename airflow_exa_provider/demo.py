"""``make demo``: the exa_pipeline DAG end to end on embedded defaults.

A throwaway SQLite Airflow database, the S3 endpoint in ``AWS_ENDPOINT_URL``
(or an embedded S3 server), SQLite as the database, a LocalCluster instead of
Slurm.  Prints where each stage's data went and how long it took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def seed(bucket: str, db_url: str, parts: int, s3_options: dict | None = None) -> None:
    """Weather observations as Parquet objects in ``bucket`` and a ``stations`` table."""
    import numpy as np
    import pandas as pd
    import s3fs

    from dask_staging import write_table

    fs = s3fs.S3FileSystem(**(s3_options or {}))
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    rng = np.random.default_rng(3)
    for i in range(parts):
        frame = pd.DataFrame(
            {"station": rng.integers(0, 30, 200_000), "temperature": rng.normal(9, 7, 200_000)}
        )
        with fs.open(f"{bucket}/weather/part-{i:02d}.parquet", "wb") as f:
            frame.to_parquet(f)
    stations = pd.DataFrame({"station": range(30), "name": [f"station-{i:02d}" for i in range(30)]})
    write_table(stations, db_url, "stations", mode="replace")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dags", default="dags", help="the DAGs folder (default: dags)")
    parser.add_argument(
        "--seed-only",
        action="store_true",
        help="only write the example data: Parquet objects to --bucket on the S3 endpoint of "
        "AWS_ENDPOINT_URL and a stations table to --db-url (for exa_pipeline on a real deployment)",
    )
    parser.add_argument("--bucket", default="exa-pipeline", help="bucket for --seed-only")
    parser.add_argument("--db-url", help="database URL for --seed-only, e.g. postgresql://…")
    parser.add_argument("--db-conn-id", help="or an Airflow connection for the database")
    parser.add_argument(
        "--aws-conn-id", help="an Airflow aws connection for the S3 endpoint (default: AWS_* env)"
    )
    parser.add_argument("--parts", type=int, default=4, help="weather objects for --seed-only")
    args = parser.parse_args(argv)
    if args.seed_only:
        from airflow_exa_provider.hooks.staging import StagingHook, aws_settings, db_url

        if not (args.db_url or args.db_conn_id):
            parser.error("--seed-only needs --db-url or --db-conn-id")
        url = args.db_url or db_url(StagingHook.get_connection(args.db_conn_id))
        s3 = (
            aws_settings(StagingHook.get_connection(args.aws_conn_id))[1]
            if args.aws_conn_id
            else {}
        )
        seed(args.bucket, url, args.parts, s3)
        print(f"seeded s3://{args.bucket}/weather/ ({args.parts} objects) and table stations")
        return 0
    work = Path(tempfile.mkdtemp(prefix="exa-demo-"))
    os.environ.update(
        AIRFLOW_HOME=str(work / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__LOGGING__LOGGING_LEVEL=os.environ.get(
            "AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING"
        ),
        AIRFLOW__CORE__DAGS_FOLDER=str(Path(args.dags).resolve()),
        EXA_PIPELINE_BUCKET="exa-demo",
        EXA_PIPELINE_ROOT=str(work / "node-cache"),
        EXA_PIPELINE_SLURM="0",
        EXA_PIPELINE_PARTS="4",
        EXA_PIPELINE_DB_URL=f"sqlite:///{work / 'demo.db'}",
    )
    server = None
    if not os.environ.get("AWS_ENDPOINT_URL"):
        from dask_staging.demo import start_embedded_s3

        server = start_embedded_s3()
        print(f"embedded S3 server at {os.environ['AWS_ENDPOINT_URL']}")
    os.environ["AIRFLOW_CONN_EXA_S3"] = json.dumps(
        {
            "conn_type": "aws",
            "login": os.environ.get("AWS_ACCESS_KEY_ID"),
            "password": os.environ.get("AWS_SECRET_ACCESS_KEY"),
            "extra": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]},
        }
    )
    seed("exa-demo", os.environ["EXA_PIPELINE_DB_URL"], 4)
    airflow = str(Path(sys.executable).with_name("airflow"))
    subprocess.run([airflow, "db", "migrate"], check=True, capture_output=True)

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    if bag.import_errors:
        print(bag.import_errors, file=sys.stderr)
        return 1
    failed = False
    for dag_id in ("exa_pipeline", "exa_report"):
        start = time.perf_counter()
        run = bag.get_dag(dag_id).test()
        print(f"\n{dag_id}: {run.state} in {time.perf_counter() - start:.1f} s")
        for ti in sorted(run.get_task_instances(), key=lambda t: t.start_date or 0):
            seconds = ti.duration or 0
            value = ti.xcom_pull(task_ids=ti.task_id)
            print(f"  {ti.task_id:16s} {ti.state:8s} {seconds:5.1f} s")
            items = value.items() if isinstance(value, dict) else [("result", value)]
            for name, where in items:
                print(f"      {name} -> {json.dumps(where, default=str)[:150]}")
        failed |= run.state != "success"
    print(f"\ncache on this 'node': {os.environ['EXA_PIPELINE_ROOT']}")
    print(
        f"results in s3://exa-demo/results/ and table station_means of "
        f"{os.environ['EXA_PIPELINE_DB_URL']}"
    )
    if server is not None:
        server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
