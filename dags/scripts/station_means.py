"""Compute step of exa_pipeline when run as a Slurm job: station means from staged Parquet.

    python station_means.py OUT.parquet STAGED_PATH...

Weather files have (station, temperature); the stations query result has
(station, name).  Writes one Parquet file with station, name, mean, readings.
"""

import sys

import pandas as pd


def main(out: str, paths: list[str]) -> None:
    frames = [pd.read_parquet(p) for p in paths]
    weather = pd.concat([f for f in frames if "temperature" in f.columns])
    names = next(f for f in frames if "name" in f.columns)
    summary = (
        weather.groupby("station")
        .temperature.agg(mean="mean", readings="count")
        .reset_index()
        .merge(names, on="station")
    )
    summary.to_parquet(out, index=False)
    print(f"wrote {len(summary)} station means to {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
