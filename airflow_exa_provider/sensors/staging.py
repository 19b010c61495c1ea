"""StagedDataSensor: wait until objects or query results are present in a cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_exa_provider.deferral import resolve_deferrable
from airflow_exa_provider.triggers.staging import StagedDataTrigger, missing


class StagedDataSensor(BaseSensorOperator):
    """Succeed when every URL (or ``sql+…`` query key) is cached under ``root``."""

    template_fields: Sequence[str] = ("urls", "root")

    def __init__(
        self,
        *,
        urls: list[str],
        root: str,
        index_url: str | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.urls, self.root, self.index_url = urls, root, index_url
        self.deferrable = deferrable

    def execute(self, context) -> None:
        if resolve_deferrable(self.deferrable) and not self.poke(context):
            self.defer(
                trigger=StagedDataTrigger(self.urls, self.root, self.index_url, self.poke_interval),
                method_name="execute_complete",
            )
        super().execute(context)

    def poke(self, context) -> bool:
        left = missing(self.root, self.urls, self.index_url)
        if left:
            self.log.info("%d of %d not cached yet, e.g. %s", len(left), len(self.urls), left[0])
        return not left

    def execute_complete(self, context, event: dict) -> None:
        if event["status"] != "success":
            raise RuntimeError(f"waiting for staged data failed: {event['message']}")
