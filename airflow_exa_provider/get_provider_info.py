"""Provider metadata read by Airflow's provider manager."""

from __future__ import annotations

from airflow_exa_provider import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-exa-provider",
        "name": "Exa staging",
        "description": "Stage S3 objects and SQL query results onto HPC and cloud nodes.",
        "versions": [__version__],
    }
