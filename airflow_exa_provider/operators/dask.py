"""DaskOperator: run a Python callable with a Dask client (existing or ephemeral cluster)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_exa_provider.hooks.dask import DaskHook


class DaskOperator(BaseOperator):
    """Call ``python_callable(client, *op_args, **op_kwargs)`` and return its result.

    Staged paths usually arrive through ``op_kwargs`` templated from a
    StageInOperator's XCom, e.g. ``{"paths": "{{ ti.xcom_pull('stage_in') }}"}``
    with ``render_template_as_native_obj=True`` on the DAG.
    """

    template_fields: Sequence[str] = ("op_args", "op_kwargs")

    def __init__(
        self,
        *,
        python_callable: Callable,
        op_args: list | None = None,
        op_kwargs: dict | None = None,
        dask_conn_id: str | None = None,
        cluster: str = "local",
        cluster_options: dict | None = None,
        n_workers: int = 2,
        staging_root: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args, self.op_kwargs = op_args or [], op_kwargs or {}
        self.hook_args = {
            "dask_conn_id": dask_conn_id,
            "cluster": cluster,
            "cluster_options": cluster_options,
            "n_workers": n_workers,
            "staging_root": staging_root,
        }

    def execute(self, context) -> Any:
        with DaskHook(**self.hook_args).client() as client:
            self.log.info("running %s on %s", self.python_callable.__name__, client)
            return self.python_callable(client, *self.op_args, **self.op_kwargs)
