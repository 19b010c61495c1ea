"""Slurm access: pure command builders and parsers, and one small module per backend."""
