"""Decide whether a task defers: explicitly, by configuration, or when a triggerer is up.

Deferring without a running triggerer leaves a task waiting forever, so the
operators of this provider defer by default only when the API server's health
endpoint reports a healthy triggerer (or ``[operators] default_deferrable`` is
set); otherwise they wait in the worker and say so in the task log.
"""

from __future__ import annotations

import logging

import httpx

log = logging.getLogger(__name__)


def triggerer_healthy(health: dict) -> bool:
    """Whether ``GET /api/v2/monitor/health`` output reports a live triggerer."""
    return (health.get("triggerer") or {}).get("status") == "healthy"


def health_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/api/v2/monitor/health"


def triggerer_available(base_url: str | None = None, timeout: float = 3.0) -> bool:
    """Ask the Airflow API server (``[api] base_url``) whether a triggerer is running."""
    from airflow.sdk import conf

    base_url = base_url or conf.get("api", "base_url", fallback="") or "http://localhost:8080"
    try:
        response = httpx.get(health_url(base_url), timeout=timeout)
        response.raise_for_status()
        return triggerer_healthy(response.json())
    except (httpx.HTTPError, ValueError) as exc:
        log.info("no triggerer health from %s (%s)", base_url, type(exc).__name__)
        return False


def resolve_deferrable(deferrable: bool | None) -> bool:
    """``deferrable`` if given; else the configured default, else triggerer presence."""
    if deferrable is not None:
        return deferrable
    from airflow.sdk import conf

    if conf.getboolean("operators", "default_deferrable", fallback=False):
        return True
    available = triggerer_available()
    if not available:
        log.info("no healthy triggerer reported by the API server: waiting in the worker")
    return available
