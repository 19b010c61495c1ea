"""StagedDataTrigger: wait in the triggerer until URLs are present in a cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


def missing(root: str, urls: list[str], index_url: str | None) -> list[str]:
    from dask_staging import Cache

    cache = Cache(root, index_url=index_url)
    try:
        return [url for url in urls if not cache.contains(url)]
    finally:
        cache.close()


class StagedDataTrigger(BaseTrigger):
    """Fire once every URL (or ``sql+…`` key) is cached under ``root``."""

    def __init__(
        self, urls: list[str], root: str, index_url: str | None = None, poll_interval: float = 5.0
    ):
        super().__init__()
        self.urls, self.root, self.index_url = list(urls), root, index_url
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_exa_provider.triggers.staging.StagedDataTrigger",
            {
                "urls": self.urls,
                "root": self.root,
                "index_url": self.index_url,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                left = await asyncio.to_thread(missing, self.root, self.urls, self.index_url)
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            if not left:
                yield TriggerEvent({"status": "success", "urls": self.urls})
                return
            await asyncio.sleep(self.poll_interval)
