"""The values: xsp.Trace and xsp.Span (trace.py, views over the C core's columns), xsp.Measurement
and its Latency record (measurement.py) and the names of torch.compile's spans (compiling.py).
Values hold data; the verbs over them are the layers above (formats, producers, analysis,
report), which read a Trace through its public members only."""
