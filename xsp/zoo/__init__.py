"""xsp.zoo: XSP's evaluation pipeline (issue 26), profiling a model zoo across batch sizes and
systems into a Parquet results dataset with DuckDB over it.

The package is built in rooms that follow the data: catalog (the models a zoo holds: manifests,
sources, the built-in zoo), system (the machine an evaluation ran on: fingerprint, energy
counters, price), store (the results dataset: one Parquet file per evaluation and table, DuckDB
views over them).  Nothing here is imported by `import xsp`.
"""

# The verbs, loaded on first use (the catalog imports torch; `xsp zoo list` stays quick):
# xsp.zoo.run(zoo, results_dir, ...) runs a zoo (runner.run), xsp.zoo.open(results_dir) gives
# the DuckDB connection with the views (store.open), xsp.zoo.query(results_dir, sql) a
# DataFrame, xsp.zoo.load(spec) the models a zoo holds (catalog.load).
_VERBS = {"run": "runner", "open": "store", "query": "store", "load": "catalog"}


def __getattr__(name):
    if name in _VERBS:
        import importlib
        return getattr(importlib.import_module("." + _VERBS[name], __name__), name)
    raise AttributeError("module 'xsp.zoo' has no attribute %r" % (name,))


__all__ = ["run", "open", "query", "load"]
