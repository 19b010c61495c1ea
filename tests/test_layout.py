"""Pure checks of URL normalisation, on-disk names, checksums and part plans."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dask_staging import checksum, layout, owner
from dask_staging.transfer import plan_parts


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/key", "s3://bucket/key"),
        ("S3A://bucket/a/b.parquet", "s3://bucket/a/b.parquet"),
        ("s3:///bucket//key", "s3://bucket//key"),
        ("file:///tmp/x", "file:///tmp/x"),
    ],
)
def test_normalize_url(url, expected):
    assert layout.normalize_url(url) == expected


@pytest.mark.parametrize("url", ["bucket/key", "s3://", "staged::s3://b/k", "s3:///"])
def test_normalize_url_rejects_bad_urls(url):
    with pytest.raises(ValueError, match="URL"):
        layout.normalize_url(url)


@pytest.mark.parametrize(
    "key",
    [
        "../../../etc/passwd",
        "/etc/passwd",
        "a/../../..//root/.ssh/authorized_keys",
        "\u2025/\u2025/etc/passwd",  # two-dot leader
        "..%2f..%2fetc%2fpasswd",
        "x\x00/../y",
        "dir/" + "../" * 50 + "z.parquet",
        "C:\\Windows\\system32",
    ],
)
def test_no_key_escapes_the_root(tmp_path, key):
    url = layout.normalize_url(f"s3://bucket/{key}")
    rel = layout.relative_path(url)
    path = Path(layout.inside(tmp_path, rel))
    assert tmp_path in path.parents
    assert rel.startswith("data/") and ".." not in rel and "\\" not in rel


@settings(max_examples=600, deadline=None)
@given(key=st.text(min_size=1, max_size=300), scheme=st.sampled_from(["s3", "S3A", "gs", "file"]))
def test_property_no_object_key_or_url_resolves_outside_the_root(tmp_path_factory, key, scheme):
    root = tmp_path_factory.getbasetemp() / "root"
    try:
        url = layout.normalize_url(f"{scheme}://bucket/{key}")
    except ValueError:
        return  # refused outright: nothing is written
    for rel in (layout.relative_path(url), layout.temp_path(url)):
        path = Path(layout.inside(root, rel))
        assert root in path.parents and ".." not in Path(rel).parts
        assert "\x00" not in rel and "/" not in rel.split("/", 2)[-1]


@settings(max_examples=300, deadline=None)
@given(rel=st.text(max_size=200))
def test_property_inside_never_returns_a_path_outside(tmp_path_factory, rel):
    root = tmp_path_factory.getbasetemp() / "root"
    try:
        path = Path(layout.inside(root, rel))
    except ValueError:
        return
    assert root in path.parents and ".." not in path.relative_to(root).parts


def test_inside_refuses_escapes(tmp_path):
    with pytest.raises(ValueError, match="outside the cache root"):
        layout.inside(tmp_path, "../elsewhere")


def test_names_keep_a_safe_extension_and_differ_per_url():
    a = layout.relative_path("s3://b/x/data.parquet")
    b = layout.relative_path("s3://b/y/data.parquet")
    assert a.endswith(".parquet") and b.endswith(".parquet") and a != b
    assert not layout.relative_path("s3://b/evil.$(rm -rf)").endswith(")")


def test_temp_names_carry_host_and_pid():
    name = os.path.basename(layout.temp_path("s3://b/k"))
    assert layout.parse_temp_name(name) == (owner.hostname(), os.getpid())
    assert layout.parse_temp_name("junk") is None


def test_plan_parts_covers_every_byte_once():
    assert plan_parts(0, 10) == [(0, 0)]
    assert plan_parts(10, 10) == [(0, 10)]
    parts = plan_parts(25, 10)
    assert parts == [(0, 10), (10, 20), (20, 25)]


def test_checksum_from_disk_matches_part_digests(tmp_path):
    data = os.urandom(2500)
    path = tmp_path / "f"
    path.write_bytes(data)
    digests = []
    for start, end in plan_parts(len(data), 1000):
        h = checksum.new_part_hasher()
        h.update(data[start:end])
        digests.append(h.digest())
    expected = checksum.combine(1000, digests)
    assert checksum.file_checksum(str(path), 1000) == expected
    assert checksum.part_size_of(expected) == 1000
    path.write_bytes(data[:-1] + b"\x00")
    assert checksum.file_checksum(str(path), 1000) != expected


def test_checksum_of_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    expected = checksum.combine(64, [checksum.new_part_hasher().digest()])
    assert checksum.file_checksum(str(path), 64) == expected


def test_owner_liveness_uses_process_start_time():
    me = owner.current_owner()
    assert owner.alive(me, None, 0)
    host, pid, start = owner.parse(me)
    assert not owner.alive(f"{host}:{pid}:{int(start) + 1}", None, 0)  # recycled pid
    assert not owner.alive(f"{host}:999999999:1", None, 0)
    assert owner.alive("elsewhere:1:1", lease_until=100.0, now=50.0)
    assert not owner.alive("elsewhere:1:1", lease_until=100.0, now=150.0)


def test_other_protocols_go_through_fsspec(tmp_path):
    """file:// (and any fsspec protocol) uses the generic engine, with the same guarantees."""
    from dask_staging import Cache, RemoteNotFoundError

    source = tmp_path / "src.bin"
    data = os.urandom(3000)
    source.write_bytes(data)
    cache = Cache(tmp_path / "cache", part_size=1024)
    path = cache.get(f"file://{source}")
    assert Path(path).read_bytes() == data and cache.verify() == []
    with pytest.raises(RemoteNotFoundError, match="does not exist"):
        cache.get(f"file://{tmp_path}/missing")
    assert [e.url for e in cache.entries()] == [f"file://{source}"]
