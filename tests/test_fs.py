"""The staged:: protocol read by fsspec, pandas, xarray and dask."""

from __future__ import annotations

import fsspec
import numpy as np
import pandas as pd
import pytest

from dask_staging import Cache


@pytest.fixture
def staged(cache_root):
    return {"staged": {"root": str(cache_root)}}


def test_fsspec_open_reads_through_the_cache(put, staged, cache_root, get_count):
    url = put("dir/hello.txt", b"hello world")
    with fsspec.open(f"staged::{url}", **staged) as f:
        assert f.read() == b"hello world"
    before = get_count()
    with fsspec.open(f"staged::{url}", "rt", **staged) as f:
        assert f.read() == "hello world"
    assert get_count() == before
    assert Cache(cache_root).contains(url)


def test_listing_and_info_pass_through(put, bucket, staged):
    put("dir/a", b"1")
    put("dir/sub/b", b"22")
    fs, _ = fsspec.url_to_fs(f"staged::s3://{bucket}/dir", **staged)
    assert sorted(fs.ls(f"{bucket}/dir", detail=False)) == [f"{bucket}/dir/a", f"{bucket}/dir/sub"]
    assert fs.info(f"s3://{bucket}/dir/sub/b")["size"] == 2
    assert fs.find(f"{bucket}/dir") == [f"{bucket}/dir/a", f"{bucket}/dir/sub/b"]
    assert fs.exists(f"{bucket}/dir/a") and not fs.exists(f"{bucket}/dir/zzz")
    assert fs.cache.entries() == []  # metadata calls stage nothing


def test_write_modes_are_refused(bucket, staged):
    opener = fsspec.open(f"staged::s3://{bucket}/x", "wb", **staged)
    with pytest.raises(NotImplementedError, match="read-only"), opener as f:
        f.write(b"no")


def test_pandas_and_dask_read_parquet(s3, bucket, staged):
    frames = [pd.DataFrame({"k": np.arange(100) % 7, "v": np.random.rand(100)}) for _ in range(3)]
    for i, df in enumerate(frames):
        with s3.open(f"{bucket}/ds/part-{i}.parquet", "wb") as f:
            df.to_parquet(f)
    one = pd.read_parquet(f"staged::s3://{bucket}/ds/part-1.parquet", storage_options=staged)
    pd.testing.assert_frame_equal(one, frames[1])

    import dask.dataframe as dd

    ddf = dd.read_parquet(f"staged::s3://{bucket}/ds/", storage_options=staged)
    got = ddf.groupby("k").v.sum().compute().sort_index()
    want = pd.concat(frames).groupby("k").v.sum().sort_index()
    pd.testing.assert_series_equal(got, want)
    assert Cache(staged["staged"]["root"]).stats()["entries"] == 3


def test_xarray_open_dataset(s3, bucket, staged, tmp_path):
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset({"t": ("x", np.arange(10.0))})
    local = tmp_path / "d.nc"
    ds.to_netcdf(local, engine="scipy")
    s3.put(str(local), f"{bucket}/d.nc")
    with fsspec.open(f"staged::s3://{bucket}/d.nc", **staged) as f:
        got = xr.open_dataset(f, engine="scipy").load()
    xr.testing.assert_equal(got, ds)
    path = fsspec.url_to_fs(f"staged::s3://{bucket}/d.nc", **staged)[0].local_path(f"{bucket}/d.nc")
    xr.testing.assert_equal(xr.open_dataset(path).load(), ds)


def test_root_from_dask_config(put, cache_root, monkeypatch):
    import dask

    url = put("cfg", b"configured")
    with (
        dask.config.set({"staging.root": str(cache_root / "from-config")}),
        fsspec.open(f"staged::{url}") as f,
    ):
        assert f.read() == b"configured"
    assert Cache(cache_root / "from-config").contains(url)
