"""StagingHook: stage data in and out where it must land — here, over SSH, or in a Slurm job.

In this process the hook calls :mod:`dask_staging` directly.  Elsewhere it runs
the ``dask-staging`` CLI there and parses its ``--json`` output; credentials
travel on the command's stdin (never on a command line or in a log).
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from airflow.sdk import BaseHook

from airflow_exa_provider.hooks.slurm import SlurmHook

RUN_ON = ("local", "ssh", "slurm")


def aws_settings(conn) -> tuple[dict[str, str], dict[str, Any]]:
    """(environment, s3 storage options) from an ``aws``-type connection."""
    if conn is None:
        return {}, {}
    extra = conn.extra_dejson
    env, options = {}, {}
    if conn.login:
        env["AWS_ACCESS_KEY_ID"] = options["key"] = conn.login
    if conn.password:
        env["AWS_SECRET_ACCESS_KEY"] = options["secret"] = conn.password
    endpoint = extra.get("endpoint_url") or (extra.get("client_kwargs") or {}).get("endpoint_url")
    if endpoint:
        env["AWS_ENDPOINT_URL"] = options["endpoint_url"] = endpoint
    if extra.get("region_name"):
        env["AWS_REGION"] = extra["region_name"]
    return env, options


def db_url(conn) -> str:
    """A SQLAlchemy URL from a database connection (``postgres`` scheme fixed)."""
    uri = conn.get_uri()
    for old in ("postgres://", "postgresql+psycopg2://"):
        if uri.startswith(old):
            uri = "postgresql://" + uri[len(old) :]
    return uri


def without_password(url: str) -> tuple[str, dict[str, str]]:
    """A database URL without its password, and ``{"PGPASSWORD": ...}`` to pass it
    in the environment instead (so it never shows on a remote command line)."""
    import sqlalchemy as sa

    parsed = sa.engine.make_url(url)
    if parsed.password is None:
        return url, {}
    bare = parsed._replace(password=None).render_as_string(hide_password=False)
    return bare, {"PGPASSWORD": str(parsed.password)}


BENCH_OPTIONS = {
    "streams", "sizes", "small_objects", "small_size", "db_rows", "fs_size",
    "max_seconds", "max_bytes", "repeat",
}  # fmt: skip


def remote_script(env: dict[str, str], argv: list[str]) -> str:
    """A shell script that exports ``env`` and runs ``argv`` (everything quoted)."""
    lines = ["set -e"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


class StagingHook(BaseHook):
    """Stage S3 objects and SQL query results in, and files or tables out.

    Parameters
    ----------
    root : str
        Cache root where the data must land (on the machine that runs it).
    run_on : {"local", "ssh", "slurm"}
        Here; on the ``slurm_conn_id`` login node over SSH; or as a Slurm job.
    aws_conn_id : str, optional
        ``aws``-type connection with the S3 credentials and ``endpoint_url``.
    slurm_conn_id : str
        The login node for ``ssh`` and ``slurm``.
    remote_cli : str
        The ``dask-staging`` command on the remote side.
    """

    hook_name = "Staging"

    def __init__(
        self,
        root: str,
        *,
        run_on: str = "local",
        aws_conn_id: str | None = None,
        slurm_conn_id: str = SlurmHook.default_conn_name,
        remote_cli: str = "dask-staging",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if run_on not in RUN_ON:
            raise ValueError(f"run_on must be one of {', '.join(RUN_ON)}, not {run_on!r}")
        self.root, self.run_on = root, run_on
        self.aws_conn_id, self.slurm_conn_id = aws_conn_id, slurm_conn_id
        self.remote_cli = remote_cli

    def _aws(self):
        conn = self.get_connection(self.aws_conn_id) if self.aws_conn_id else None
        return aws_settings(conn)

    # -- stage in -----------------------------------------------------------------

    def stage_in(self, urls: list[str] = (), queries: list[dict] = ()) -> dict[str, str]:
        """Stage ``urls`` and ``queries`` (``{"db_conn_id"|"db_url", "sql", ...}``);
        returns ``{url or query name: local path}`` on the target machine."""
        env, s3 = self._aws()
        resolved = [self._query(q) for q in queries]
        if self.run_on == "local":
            from dask_staging import Cache

            cache = Cache(self.root, **({"s3": s3} if s3 else {}))
            paths = cache.stage(list(urls)) if urls else {}
            for name, url, sql, options in resolved:
                paths[name] = cache.stage_query(url, sql, **options)
            return paths
        paths = {}
        if urls:
            out = self._remote(
                env, [self.remote_cli, "stage", *urls, "--root", self.root, "--json"]
            )
            paths.update(json.loads(out.strip().splitlines()[-1])["paths"])
        for name, url, sql, options in resolved:
            url, password = without_password(url)
            argv = [self.remote_cli, "query", url, sql, "--root", self.root, "--json"]
            if options.get("partition_on"):
                argv += [
                    "--partition-on",
                    options["partition_on"],
                    "--partitions",
                    str(options.get("partitions") or 1),
                ]
            out = self._remote({**env, **password}, argv)
            paths[name] = json.loads(out.strip().splitlines()[-1])["path"]
        return paths

    def _query(self, query: dict) -> tuple[str, str, str, dict]:
        if "db_url" in query:
            url = query["db_url"]
        else:
            url = db_url(self.get_connection(query["db_conn_id"]))
        options = {k: query[k] for k in ("partition_on", "partitions", "ttl") if k in query}
        return query.get("name", query["sql"]), url, query["sql"], options

    # -- stage out ----------------------------------------------------------------

    def stage_out(
        self,
        local: str,
        target: str,
        *,
        table: str | None = None,
        mode: str = "append",
        writers: int = 4,
    ) -> dict:
        """Upload ``local`` to the S3 URL ``target``, or load it into ``table`` of the
        database ``target`` (a URL or a connection id)."""
        env, s3 = self._aws()
        if table and "://" not in target:
            target = db_url(self.get_connection(target))
        if self.run_on == "local":
            if table:
                from dask_staging import write_table

                return {"rows": write_table(local, target, table, mode=mode, writers=writers)}
            from dask_staging import stage_out

            stage_out(local, target, **s3)
            return {"uploaded": target}
        password = {}
        if table:
            target, password = without_password(target)
        argv = [self.remote_cli, "out", local, target, "--json"]
        if table:
            argv += ["--table", table, "--mode", mode, "--writers", str(writers)]
        return json.loads(self._remote({**env, **password}, argv).strip().splitlines()[-1])

    # -- measuring ----------------------------------------------------------------

    def bench(
        self,
        *,
        s3_prefix: str | None = None,
        db: str | None = None,
        fs: list[str] = (),
        dataset_size: int | None = None,
        reads: int = 1,
        **options,
    ) -> dict:
        """Measure the data paths where the data must land (``dask-staging bench``).

        ``db`` is a database URL or connection id; ``options`` are
        :func:`dask_staging.bench.run_benchmark` settings (``streams``, ``sizes``,
        ``max_seconds``, ...).  Returns the results, with ``"advice"`` when
        ``dataset_size`` is given.
        """
        unknown = set(options) - BENCH_OPTIONS
        if unknown:
            raise ValueError(f"unknown benchmark option(s): {', '.join(sorted(unknown))}")
        env, s3 = self._aws()
        url = db if db is None or "://" in db else db_url(self.get_connection(db))
        if self.run_on == "local":
            from dask_staging.bench import run_and_advise

            return run_and_advise(
                root=self.root, dataset_bytes=dataset_size, reads=reads, fs=list(fs),
                s3=s3_prefix, db=url, storage_options=s3, **options,
            )  # fmt: skip
        argv = [self.remote_cli, "bench", "--root", self.root, "--json", "--no-progress"]
        if url:
            url, password = without_password(url)
            env = {**env, **password}
            argv += ["--db", url]
        if s3_prefix:
            argv += ["--s3", s3_prefix]
        for path in fs:
            argv += ["--fs", path]
        if dataset_size:
            argv += ["--dataset-size", str(dataset_size), "--reads", str(reads)]
        for name, value in sorted(options.items()):
            if isinstance(value, list | tuple):
                value = ",".join(str(v) for v in value)
            argv += [f"--{name.replace('_', '-')}", str(value)]
        return json.loads(self._remote(env, argv).strip().splitlines()[-1])

    # -- running elsewhere ----------------------------------------------------------

    def _remote(self, env: dict[str, str], argv: list[str]) -> str:
        slurm = SlurmHook(self.slurm_conn_id)
        script = remote_script(env, argv)
        if self.run_on == "ssh":
            return slurm.backend.run(["sh", "-s"], stdin=script, what=argv[1])
        slurm.backend.run(["mkdir", "-p", self.root], what="creating the cache root")
        job = slurm.submit(
            script="#!/bin/bash\n" + script, options={"output": f"{self.root}/.staging-%j.out"}
        )
        while not (state := slurm.state(job)).finished:
            time.sleep(1)
        text, _ = slurm.read_log(state.stdout or f"{self.root}/.staging-{job}.out")
        if not state.succeeded:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise RuntimeError(f"staging job {job} ended {state.state}: {tail}")
        return text
