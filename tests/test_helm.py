"""The Helm chart: lint, render for two Kubernetes versions, validate offline, check what matters.

Helm is built from the Go module proxy by ``scripts/services.sh up``; every rendered
manifest is validated with kubernetes-validate's strict schemas (no cluster needed).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.conftest import IN_CI

HELM_DIR = Path(__file__).parent.parent / "helm"
CHART = HELM_DIR / "dask-staging"
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSIONS = ["1.30.0", "1.33.0"]


@pytest.fixture(scope="module")
def helm() -> str:
    tools = os.environ.get("EXA_TOOLS", os.path.expanduser("~/.cache/exa-tools/bin"))
    path = shutil.which("helm") or os.path.join(tools, "helm")
    if not os.access(path, os.X_OK):
        message = "helm is not installed; scripts/services.sh up builds it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_helm(helm: str, *args: str, chart: Path = CHART, check: bool = True):
    result = subprocess.run([helm, *args, str(chart)], capture_output=True, text=True)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def render(helm: str, *values: str, kube: str = "1.30.0", sets: tuple[str, ...] = ()) -> list:
    args = ["template", "t", "--kube-version", kube]
    for path in values:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    out = run_helm(helm, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(docs: list, kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda v: v.name if v else "default")
def test_lint_render_and_validate_for_two_kubernetes_versions(helm, values):
    files = [values] if values else []
    lint = ["lint", "--strict"] + [a for f in files for a in ("-f", str(f))]
    run_helm(helm, *lint)
    for kube in KUBE_VERSIONS:
        docs = render(helm, *files, kube=kube)
        assert docs
        for doc in docs:
            kubernetes_validate.validate(doc, kube, strict=True)


def test_workers_preload_the_plugin_and_mount_a_cache_sized_like_max_bytes(helm):
    docs = render(helm)
    [workers] = by_kind(docs, "StatefulSet").values()
    spec = workers["spec"]["template"]["spec"]
    [worker] = spec["containers"]
    env = env_of(worker)
    assert env["DASK_DISTRIBUTED__WORKER__PRELOAD"]["value"] == '["dask_staging.preload"]'
    assert env["DASK_STAGING__ROOT"]["value"] == "/cache"
    assert {"name": "cache", "mountPath": "/cache"} in worker["volumeMounts"]
    [cache] = [v for v in spec["volumes"] if v["name"] == "cache"]
    assert cache["emptyDir"]["sizeLimit"] == "20Gi"
    assert env["DASK_STAGING__MAX_BYTES"]["value"] == f"{20 * 1024 * 90 // 100} MiB"
    assert worker["args"][:2] == ["worker", "tcp://t-dask-staging-scheduler:8786"]
    assert worker["readinessProbe"]["httpGet"]["path"] == "/health"
    assert worker["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_cinder_pvc_and_external_s3(helm):
    docs = render(helm, CHART / "ci" / "cinder-pvc-values.yaml")
    [workers] = by_kind(docs, "StatefulSet").values()
    [claim] = workers["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "csi-cinder-sc-delete"
    assert claim["spec"]["resources"]["requests"]["storage"] == "200Gi"
    env = env_of(workers["spec"]["template"]["spec"]["containers"][0])
    assert env["DASK_STAGING__MAX_BYTES"]["value"] == f"{200 * 1024 * 85 // 100} MiB"
    assert env["AWS_ENDPOINT_URL"]["value"] == "https://rgw.cloud.example.org"
    ref = env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "rgw-ec2-credentials", "key": "AWS_SECRET_ACCESS_KEY"}
    assert not by_kind(docs, "Secret")  # the keys stay in the user's Secret


def test_local_ssd_host_path_is_prepared_0700_for_the_workers(helm):
    docs = render(helm, CHART / "ci" / "local-ssd-values.yaml")
    [workers] = by_kind(docs, "StatefulSet").values()
    spec = workers["spec"]["template"]["spec"]
    [cache] = [v for v in spec["volumes"] if v["name"] == "cache"]
    assert cache["hostPath"] == {"path": "/mnt/local-ssd/dask-staging", "type": "DirectoryOrCreate"}
    [init] = spec["initContainers"]
    assert init["command"][:4] == ["install", "-d", "-m", "0700"]
    assert spec["nodeSelector"] == {"node.example.org/local-ssd": "true"}


def test_generated_secrets_are_referenced_never_inlined(helm):
    values = CHART / "ci" / "everything-values.yaml"
    docs = render(helm, values)
    secrets = by_kind(docs, "Secret")
    assert set(secrets) == {"t-dask-staging-minio", "t-dask-staging-postgresql"}
    generated = [base64.b64decode(v).decode() for s in secrets.values() for v in s["data"].values()]
    assert all(len(v) >= 16 for v in generated)
    # random per install (an upgrade keeps the installed values through lookup)
    again = by_kind(render(helm, values), "Secret")
    assert again["t-dask-staging-minio"]["data"] != secrets["t-dask-staging-minio"]["data"]
    others = [d for d in docs if d["kind"] != "Secret"]
    text = yaml.safe_dump_all(others)
    assert not any(value in text for value in generated)
    for workers in by_kind(docs, "StatefulSet").values():
        for container in workers["spec"]["template"]["spec"]["containers"]:
            for name, entry in env_of(container).items():
                if any(word in name for word in ("PASSWORD", "SECRET", "ACCESS_KEY")):
                    assert "secretKeyRef" in entry["valueFrom"], name
    cinder = by_kind(docs, "StatefulSet")["t-dask-staging-worker-cinder"]
    env = env_of(cinder["spec"]["template"]["spec"]["containers"][0])
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://t-dask-staging-minio:9000"
    assert (
        "$(STAGING_INDEX_PASSWORD)@t-dask-staging-postgresql"
        in env["DASK_STAGING__INDEX_URL"]["value"]
    )
    names = [e["name"] for e in cinder["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.index("STAGING_INDEX_PASSWORD") < names.index("DASK_STAGING__INDEX_URL")
    own = render(helm, values, sets=("minio.existingSecret=my-minio",))
    assert "t-dask-staging-minio" not in by_kind(own, "Secret")


@pytest.mark.parametrize(
    "setting, message",
    [
        ("cacheSize=100", "additional properties 'cacheSize' not allowed"),
        (
            "workers[0].name=a,workers[0].replicas=two,workers[0].cache.type=pvc,workers[0].cache.sizeGi=1",
            "got string, want integer",
        ),
        (
            "workers[0].name=a,workers[0].replicas=1,workers[0].cache.type=nvme,workers[0].cache.sizeGi=1",
            "value must be one of",
        ),
        (
            "workers[0].name=a,workers[0].replicas=1,workers[0].cache.type=pvc,workers[0].cache.sizeGi=1,workers[0].cache.size=5",
            "additional properties 'size' not allowed",
        ),
        ("staging.fillPercent=150", "maximum"),
        ("s3.endpoint=rgw.example.org", "does not match pattern"),
        ("staging.sharedIndex=true", "staging.sharedIndex needs postgresql.enabled"),
    ],
)
def test_bad_values_are_rejected_with_the_reason(helm, setting, message):
    result = run_helm(
        helm, "template", "t", "--kube-version", "1.30.0", "--set", setting, check=False
    )
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_notes_tell_how_to_reach_the_dashboard_and_run_the_dag(helm, tmp_path):
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    # helm template does not print NOTES.txt: render it as the data of a ConfigMap instead
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes.tpl").write_text(
        f'{{{{- define "notes" -}}}}\n{notes}{{{{- end -}}}}\n'
    )
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: |\n{{ include "notes" . | indent 4 }}\n'
    )
    out = run_helm(
        helm,
        "template",
        "t",
        "--kube-version",
        "1.30.0",
        "-f",
        str(CHART / "ci" / "everything-values.yaml"),
        "--show-only",
        "templates/notes.yaml",
        chart=chart,
    ).stdout
    out = yaml.safe_load(out)["data"]["notes"]
    assert "port-forward svc/t-dask-staging-scheduler 8787" in out
    assert "exa_pipeline" in out and "t-dask-staging-minio" in out


def test_airflow_values_take_connections_from_secrets_and_run_our_image():
    values = yaml.safe_load((HELM_DIR / "airflow-values.yaml").read_text())
    chart = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["images"]["airflow"]["repository"] == chart["image"]["repository"]
    assert values["triggerer"]["enabled"] is True
    conns = {s["envName"]: s for s in values["secret"]}
    assert {"AIRFLOW_CONN_EXA_SLURM", "AIRFLOW_CONN_DASK_DEFAULT", "AIRFLOW_CONN_EXA_S3"} <= set(
        conns
    )
    assert all(s["secretName"] and s["secretKey"] for s in conns.values())
    assert not any(e["name"].startswith("AIRFLOW_CONN_") for e in values.get("env", []))
    dockerfile = (HELM_DIR / "image" / "Dockerfile").read_text()
    from airflow import __version__ as airflow_version

    assert f"ARG AIRFLOW_VERSION={airflow_version}" in dockerfile
    for source in ("dask_staging", "airflow_exa_provider", "dags"):
        assert f"COPY --chown=airflow:0 {source} " in dockerfile
