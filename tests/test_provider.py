"""The provider as Airflow sees it: metadata schema, discovery, connection form fields."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import airflow
import jsonschema

from airflow_exa_provider.get_provider_info import get_provider_info


def test_provider_info_matches_airflows_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    types = {c["connection-type"]: c for c in info["connection-types"]}
    assert set(types) == {"slurm", "dask"}
    slurm = types["slurm"]
    assert slurm["conn-fields"]["check_host_key"]["schema"]["default"] is True
    assert slurm["conn-fields"]["private_key"]["schema"]["format"] == "password"


def test_airflow_lists_the_provider_and_its_connection_type(airflow_db):
    airflow_cli = str(Path(sys.executable).with_name("airflow"))
    out = subprocess.run(
        [airflow_cli, "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=os.environ,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    names = [p["package_name"] for p in json.loads(out.stdout)]
    assert "airflow-exa-provider" in names
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    runtime = ProvidersManagerTaskRuntime()
    assert "slurm" in runtime.hooks and "dask" in runtime.hooks
    manager = ProvidersManager()
    assert "extra__slurm__known_hosts" in manager.connection_form_widgets
