"""StagedDataSensor: wait until objects or query results are present in a cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator


class StagedDataSensor(BaseSensorOperator):
    """Succeed when every URL (or ``sql+…`` query key) is cached under ``root``."""

    template_fields: Sequence[str] = ("urls", "root")

    def __init__(self, *, urls: list[str], root: str, index_url: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.urls, self.root, self.index_url = urls, root, index_url

    def poke(self, context) -> bool:
        from dask_staging import Cache

        cache = Cache(self.root, index_url=self.index_url)
        try:
            missing = [url for url in self.urls if not cache.contains(url)]
        finally:
            cache.close()
        if missing:
            self.log.info(
                "%d of %d not cached yet, e.g. %s", len(missing), len(self.urls), missing[0]
            )
        return not missing
