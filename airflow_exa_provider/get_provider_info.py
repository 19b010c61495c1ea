"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from airflow_exa_provider import __version__

_STRING = {"type": ["string", "null"]}
INTEGRATIONS = {
    "Slurm": "https://slurm.schedmd.com/",
    "Exa staging": "https://pypi.org/project/airflow-exa-provider/",
    "Dask": "https://docs.dask.org/",
}
_NAMES = {"slurm": "Slurm", "staging": "Exa staging", "dask": "Dask"}


def _modules(layer: str, **modules: str) -> list[dict]:
    return [
        {"integration-name": _NAMES[key], "python-modules": [f"airflow_exa_provider.{layer}.{mod}"]}
        for key, mod in modules.items()
    ]


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-exa-provider",
        "name": "Exa staging",
        "description": "Stage S3 objects and SQL query results onto HPC and cloud nodes, run "
        "Slurm jobs and Dask computations on them, and stage the results out.",
        "versions": [__version__],
        "hooks": _modules("hooks", slurm="slurm", staging="staging", dask="dask"),
        "operators": _modules("operators", slurm="slurm", staging="staging", dask="dask"),
        "sensors": _modules("sensors", slurm="slurm", staging="staging"),
        "triggers": _modules("triggers", slurm="slurm", staging="staging"),
        "integrations": [
            {"integration-name": name, "external-doc-url": url, "tags": ["software"]}
            for name, url in INTEGRATIONS.items()
        ],
        "connection-types": [
            {
                "connection-type": "dask",
                "hook-class-name": "airflow_exa_provider.hooks.dask.DaskHook",
                "hook-name": "Dask",
                "conn-fields": {
                    "protocol": {
                        "label": "Protocol",
                        "schema": {"type": ["string", "null"], "default": "tcp"},
                    },
                    "tls_ca_file": {"label": "TLS CA file", "schema": _STRING},
                    "tls_client_cert": {"label": "TLS client certificate", "schema": _STRING},
                    "tls_client_key": {"label": "TLS client key", "schema": _STRING},
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password"],
                    "relabeling": {"host": "Scheduler host"},
                    "placeholders": {"port": "8786"},
                },
            },
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
