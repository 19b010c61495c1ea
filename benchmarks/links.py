"""The test MinIO for benchmarks, directly or through emulated links (toxiproxy toxics)."""

from __future__ import annotations

import atexit
import json
import os
import urllib.error
import urllib.request

TOXIPROXY = os.environ.get("EXA_TOXIPROXY_API", "http://127.0.0.1:8474")
TOXIC_PORT = int(os.environ.get("EXA_TOXIC_S3_PORT", "9100"))
ENDPOINT = os.environ.get("EXA_MINIO_ENDPOINT", "http://127.0.0.1:9000")


def use_minio() -> None:
    """Point the standard AWS variables at the test MinIO (as its clients expect)."""
    os.environ.update(
        AWS_ACCESS_KEY_ID=os.environ.get("EXA_MINIO_USER", "exa-minio"),
        AWS_SECRET_ACCESS_KEY=os.environ.get("EXA_MINIO_PASSWORD", "exa-minio-secret"),
        AWS_ENDPOINT_URL=ENDPOINT,
        AWS_REGION="us-east-1",
    )


def _call(method: str, path: str, body=None):
    request = urllib.request.Request(
        f"{TOXIPROXY}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise


def link(name: str, toxics: dict[str, dict]) -> str:
    """A proxy to MinIO whose responses pass ``{toxic type: attributes}``; returns its URL.

    The proxy is removed when the process exits, or by :func:`remove`.
    """
    _call("DELETE", f"/proxies/{name}")
    atexit.register(_call, "DELETE", f"/proxies/{name}")
    _call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{TOXIC_PORT}",
                               "upstream": ENDPOINT.split("://")[1], "enabled": True})  # fmt: skip
    for toxic, attributes in toxics.items():
        body = {"type": toxic, "stream": "downstream", "attributes": attributes}
        _call("POST", f"/proxies/{name}/toxics", body)
    return f"http://127.0.0.1:{TOXIC_PORT}"


def remove(name: str) -> None:
    _call("DELETE", f"/proxies/{name}")


def wan(latency_ms: int = 10, rate_kbs: int = 50_000) -> str:
    """A WAN-like link: ``latency_ms`` each way and ``rate_kbs`` KB/s per connection."""
    return link("bench-s3", {"latency": {"latency": latency_ms}, "bandwidth": {"rate": rate_kbs}})
