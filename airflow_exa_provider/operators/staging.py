"""Stage data in before a computation and its results out after it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator

from airflow_exa_provider.hooks.staging import StagingHook


def asset_uri(target: str, table: str | None = None) -> str:
    """The Asset a stage-out produces: the S3 URL, or ``scheme://host/db/table``
    (never with credentials) for a table; a bare connection id becomes ``postgres://<id>``."""
    if not table:
        return target
    if "://" not in target:
        return f"postgres://{target}/{table}"
    scheme, rest = target.split("://", 1)
    return f"{scheme.split('+')[0]}://{rest.split('@')[-1].rstrip('/')}/{table}"


class _StagingOperator(BaseOperator):
    """Where staging runs: ``root`` on this machine, over SSH, or in a Slurm job."""

    def __init__(
        self,
        *,
        root: str = "/tmp",
        run_on: str = "local",
        aws_conn_id: str | None = None,
        slurm_conn_id: str = "slurm_default",
        remote_cli: str = "dask-staging",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.root, self.run_on = root, run_on
        self.aws_conn_id, self.slurm_conn_id = aws_conn_id, slurm_conn_id
        self.remote_cli = remote_cli

    @property
    def hook(self) -> StagingHook:
        return StagingHook(
            self.root,
            run_on=self.run_on,
            aws_conn_id=self.aws_conn_id,
            slurm_conn_id=self.slurm_conn_id,
            remote_cli=self.remote_cli,
        )


class StageInOperator(_StagingOperator):
    """Stage S3 objects and SQL query results into a cache; returns ``{name: path}``.

    Parameters
    ----------
    urls : list of str
        ``s3://bucket/key`` URLs (and any other fsspec URL).
    queries : list of dict
        ``{"name": ..., "db_conn_id": ... or "db_url": ..., "sql": ...,
        "partition_on": ..., "partitions": ...}``.
    root : str
        Cache root on the machine where the data must land.
    run_on : {"local", "ssh", "slurm"}
        Stage here, on the ``slurm_conn_id`` login node over SSH, or in a Slurm job.
    aws_conn_id, slurm_conn_id : str
    """

    template_fields: Sequence[str] = ("urls", "queries", "root")

    def __init__(
        self, *, urls: list[str] | None = None, queries: list[dict] | None = None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.urls, self.queries = urls or [], queries or []

    def execute(self, context) -> dict[str, str]:
        paths = self.hook.stage_in(self.urls, self.queries)
        for name, path in paths.items():
            self.log.info("staged %s -> %s", name, path)
        return paths


class StageOutOperator(_StagingOperator):
    """Upload a file or directory to S3, or load it into a database table.

    The target is declared as an Airflow Asset (``outlets``), so DAGs scheduled
    on it run when this task succeeds.

    Parameters
    ----------
    source : str
        Local file or directory (Parquet, CSV, anything for S3).
    target : str
        ``s3://bucket/prefix``, or a database connection id / URL with ``table``.
    table : str, optional
    mode : {"append", "replace", "create"}
    writers : int
    """

    template_fields: Sequence[str] = ("source", "target", "table")

    def __init__(
        self,
        *,
        source: str,
        target: str,
        table: str | None = None,
        mode: str = "append",
        writers: int = 4,
        **kwargs: Any,
    ):
        if "outlets" not in kwargs and "{{" not in target:
            kwargs["outlets"] = [Asset(asset_uri(target, table))]
        super().__init__(**kwargs)
        self.source, self.target, self.table = source, target, table
        self.mode, self.writers = mode, writers

    def execute(self, context) -> dict:
        result = self.hook.stage_out(
            self.source, self.target, table=self.table, mode=self.mode, writers=self.writers
        )
        where = f"{self.target} table {self.table}" if self.table else self.target
        self.log.info("staged out %s -> %s", self.source, where.split("@")[-1])
        return result


class StagingBenchOperator(_StagingOperator):
    """Measure file system, S3 and database rates where the data would land, and advise.

    Runs ``dask-staging bench`` with ``run_on`` (here, on the login node, or as a
    Slurm job on a compute node, whose numbers are the ones that matter); logs the
    advice and returns the results (measurements, skipped steps, advice) as XCom.

    Parameters
    ----------
    s3_prefix : str, optional
        ``s3://bucket/prefix`` where test objects may be written (deleted afterwards).
    db : str, optional
        PostgreSQL connection id or URL.
    fs : list of str
        More directories to measure besides ``root`` (e.g. scratch).
    dataset_size : int, optional
        Bytes of the dataset to advise for; ``reads`` is how often it is read.
    bench_options : dict, optional
        ``streams``, ``sizes``, ``max_seconds``, ``max_bytes``, ... of ``dask-staging bench``.
    """

    template_fields: Sequence[str] = ("s3_prefix", "db", "fs", "root")

    def __init__(
        self,
        *,
        s3_prefix: str | None = None,
        db: str | None = None,
        fs: list[str] | None = None,
        dataset_size: int | None = None,
        reads: int = 1,
        bench_options: dict | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.s3_prefix, self.db, self.fs = s3_prefix, db, fs or []
        self.dataset_size, self.reads = dataset_size, reads
        self.bench_options = bench_options or {}

    def execute(self, context) -> dict:
        results = self.hook.bench(
            s3_prefix=self.s3_prefix,
            db=self.db,
            fs=self.fs,
            dataset_size=self.dataset_size,
            reads=self.reads,
            **self.bench_options,
        )
        where = results["host"] + (
            f" (Slurm job {results['slurm_job']})" if results.get("slurm_job") else ""
        )
        self.log.info("measured %d data paths on %s", len(results["measurements"]), where)
        for m in results["measurements"]:
            self.log.info(
                "%-4s %-5s %-28s %3d streams  %10.1f MB/s  %s",
                m["tier"], m["op"], m["method"], m["streams"], m["mb_per_s"], m["target"],
            )  # fmt: skip
        for text in results.get("advice", {}).get("text", []):
            for line in text.splitlines():
                self.log.info("%s", line)
        return results
