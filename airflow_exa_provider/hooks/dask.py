"""DaskHook: a Dask client for a task, from a ``dask`` connection or an ephemeral cluster."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from airflow.sdk import BaseHook


class DaskHook(BaseHook):
    """Connect to a Dask scheduler, or start a cluster for the duration of a task.

    Parameters
    ----------
    dask_conn_id : str, optional
        ``dask`` connection: host/port of the scheduler (``tcp://`` unless
        ``extra.protocol``); TLS files in ``extra`` (``tls_ca_file``,
        ``tls_client_cert``, ``tls_client_key``).
    cluster : {"local", "slurm"}, optional
        Without a connection: a LocalCluster, or a SLURMCluster (dask-jobqueue)
        with ``cluster_options``.
    staging_root : str, optional
        Register :class:`dask_staging.StagingPlugin` with this root.
    """

    conn_name_attr = "dask_conn_id"
    default_conn_name = "dask_default"
    conn_type = "dask"
    hook_name = "Dask"

    def __init__(
        self,
        dask_conn_id: str | None = None,
        *,
        cluster: str = "local",
        cluster_options: dict | None = None,
        n_workers: int = 2,
        staging_root: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dask_conn_id, self.cluster = dask_conn_id, cluster
        self.cluster_options, self.n_workers = cluster_options or {}, n_workers
        self.staging_root = staging_root

    @contextlib.contextmanager
    def client(self) -> Iterator:
        from distributed import Client

        with contextlib.ExitStack() as stack:
            if self.dask_conn_id:
                conn = self.get_connection(self.dask_conn_id)
                extra = conn.extra_dejson
                address = f"{extra.get('protocol', 'tcp')}://{conn.host}:{conn.port or 8786}"
                security = None
                if extra.get("tls_ca_file"):
                    from distributed.security import Security

                    security = Security(
                        tls_ca_file=extra["tls_ca_file"],
                        tls_client_cert=extra.get("tls_client_cert"),
                        tls_client_key=extra.get("tls_client_key"),
                        require_encryption=True,
                    )
                client = stack.enter_context(Client(address, security=security))
            else:
                client = stack.enter_context(Client(stack.enter_context(self._cluster())))
                client.wait_for_workers(self.n_workers, timeout=300)
            if self.staging_root:
                from dask_staging import StagingPlugin

                client.register_plugin(StagingPlugin(root=self.staging_root))
            yield client

    def _cluster(self):
        if self.cluster == "slurm":
            from dask_jobqueue import SLURMCluster

            options = {
                "cores": 1,
                "memory": "2GB",
                "processes": 1,
                "python": sys.executable,
                **self.cluster_options,
            }
            cluster = SLURMCluster(**options)
            cluster.scale(jobs=self.n_workers)
            return cluster
        if self.cluster != "local":
            raise ValueError(f"cluster must be 'local' or 'slurm', not {self.cluster!r}")
        from distributed import LocalCluster

        return LocalCluster(
            n_workers=self.n_workers,
            threads_per_worker=1,
            dashboard_address=":0",
            **self.cluster_options,
        )
