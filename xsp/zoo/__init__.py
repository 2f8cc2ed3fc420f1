"""xsp.zoo: XSP's evaluation pipeline (issue 26), profiling a model zoo across batch sizes and
systems into a Parquet results dataset with DuckDB over it.

The package is built in rooms that follow the data: catalog (the models a zoo holds: manifests,
sources, the built-in zoo), system (the machine an evaluation ran on: fingerprint, energy
counters, price), store (the results dataset: one Parquet file per evaluation and table, DuckDB
views over them).  Nothing here is imported by `import xsp`.
"""
