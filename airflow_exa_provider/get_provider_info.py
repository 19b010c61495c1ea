"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from airflow_exa_provider import __version__

_STRING = {"type": ["string", "null"]}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-exa-provider",
        "name": "Exa staging",
        "description": "Stage S3 objects and SQL query results onto HPC and cloud nodes, run "
        "Slurm jobs and Dask computations on them, and stage the results out.",
        "versions": [__version__],
        "hooks": [
            {"integration-name": "Slurm", "python-modules": ["airflow_exa_provider.hooks.slurm"]},
        ],
        "operators": [
            {
                "integration-name": "Slurm",
                "python-modules": ["airflow_exa_provider.operators.slurm"],
            },
        ],
        "sensors": [
            {"integration-name": "Slurm", "python-modules": ["airflow_exa_provider.sensors.slurm"]},
        ],
        "triggers": [
            {
                "integration-name": "Slurm",
                "python-modules": ["airflow_exa_provider.triggers.slurm"],
            },
        ],
        "integrations": [
            {
                "integration-name": "Slurm",
                "external-doc-url": "https://slurm.schedmd.com/",
                "tags": ["software"],
            },
        ],
        "connection-types": [
            {
                "connection-type": "slurm",
                "hook-class-name": "airflow_exa_provider.hooks.slurm.SlurmHook",
                "hook-name": "Slurm",
                "conn-fields": {
                    "key_file": {"label": "Private key file", "schema": _STRING},
                    "private_key": {
                        "label": "Private key (inline)",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "known_hosts": {"label": "known_hosts file", "schema": _STRING},
                    "host_key": {
                        "label": "Host public key (inline)",
                        "schema": _STRING,
                        "description": "e.g. 'ssh-ed25519 AAAA...'; checked like known_hosts",
                    },
                    "check_host_key": {
                        "label": "Check host key",
                        "schema": {"type": ["boolean", "null"], "default": True},
                    },
                    "rest_url": {
                        "label": "slurmrestd URL",
                        "schema": _STRING,
                        "description": "use the REST API instead of SSH; the password is the JWT",
                    },
                    "api_version": {
                        "label": "slurmrestd API version",
                        "schema": {"type": ["string", "null"], "default": "v0.0.38"},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {
                        "host": "Login node",
                        "login": "User",
                        "password": "JWT token (REST only)",
                    },
                    "placeholders": {"host": "login.cluster.example.org", "port": "22"},
                },
            },
        ],
    }
