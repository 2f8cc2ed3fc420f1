"""The analyses: tables (DataFrames) over a Trace, a Measurement or a span table.

    xsp.analysis.ops(trace), .layers(m), .kernels_by_name(trace), .roofline(trace), ...
    xsp.analysis.flops, .memory, .compiled, .distributed, .compare, .peaks: the rooms

The op, layer, kernel, phase and roofline tables are tables.py's, offered here by name; flops
(FLOPs and bytes per op), memory (profile_memory's figures), compiled (torch.compile's spans),
distributed (merging ranks, the analyses across them), compare (two runs, their changes judged
against the noise) and peaks (the machine's roofs for the roofline) are modules of their own.
This layer reads the values (xsp.values) and the formats (a path is loaded), never the
producers or the reports.  Loaded on first use: pandas loads with the first table.
"""
_TABLES = ("model_latency", "setup", "phases", "ops", "layers", "layer_ranking", "layer_types",
           "kernels", "kernels_by_name", "kernels_by_layer", "kernels_by_op", "gpu_vs_cpu",
           "roofline", "forward_time", "redispatches")

__all__ = list(_TABLES) + ["tables", "flops", "memory", "compiled", "distributed", "compare",
                           "peaks"]


def __getattr__(name):
    import importlib
    if name in _TABLES:
        value = getattr(importlib.import_module("xsp.analysis.tables"), name)
    elif name in ("tables", "flops", "memory", "compiled", "distributed", "compare", "peaks"):
        value = importlib.import_module("xsp.analysis." + name)
    else:
        raise AttributeError("module 'xsp.analysis' has no attribute %r" % name)
    globals()[name] = value
    return value
