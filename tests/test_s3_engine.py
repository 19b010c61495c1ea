"""Pure checks of the S3 engine's settings and error messages."""

from __future__ import annotations

from obstore import exceptions as obx

from dask_staging.engines.s3 import split_url, store_settings, translate
from dask_staging.errors import RemoteAccessError, RemoteNotFoundError, TransferError

SECRET = "very-secret-value"


def test_settings_follow_s3fs_names_and_env(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env:9000")
    config, client = store_settings({"key": "k", "secret": SECRET})
    assert config["endpoint"] == "http://env:9000" and client["allow_http"]
    assert config["access_key_id"] == "k" and config["secret_access_key"] == SECRET
    config, client = store_settings({"client_kwargs": {"endpoint_url": "https://s3.example"}})
    assert config["endpoint"] == "https://s3.example" and not client["allow_http"]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    config, _ = store_settings({"anon": True})
    assert "endpoint" not in config and config["skip_signature"]


def test_split_url():
    assert split_url("s3://b/a/b/c") == ("b", "a/b/c")


def test_errors_are_one_clear_sentence_without_secrets():
    url = "s3://bkt/key"
    body = "Server returned non-2xx status code: 404 Not Found: <Error><Code>{}</Code></Error>"
    err = translate(FileNotFoundError(body.format("NoSuchBucket")), url)
    assert isinstance(err, RemoteNotFoundError) and "bucket 'bkt' does not exist" in str(err)
    err = translate(FileNotFoundError(body.format("NoSuchKey")), url)
    assert str(err) == "s3://bkt/key does not exist"
    denied = obx.PermissionDeniedError(
        f"status code: 403 Forbidden: <Code>SignatureDoesNotMatch</Code> secret={SECRET}"
    )
    err = translate(denied, url)
    assert isinstance(err, RemoteAccessError)
    assert "SignatureDoesNotMatch" in str(err) and SECRET not in str(err)
    err = translate(obx.GenericError("error sending request: Connection refused"), url)
    assert isinstance(err, TransferError) and "could not be reached" in str(err)
    assert "\n" not in str(err)
