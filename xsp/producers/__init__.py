"""The producers of values: xsp.profile (profiler.py: the sessions of levels M, L and G),
xsp.measure and xsp.sweep (leveled.py), torch.compile's spans while recording (dynamo.py) and
the clock samples of a distributed job (clock.py)."""
