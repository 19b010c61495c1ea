"""Airflow provider for staging data between clouds and HPC clusters (hooks, operators, sensors)."""

__version__ = "0.1.0"
