"""xsp's exception classes (TraceFormatError comes from the C core: xsp._core)."""


class ProfilerError(RuntimeError):
    """A profiling session cannot start or stop as asked (e.g. one is already active)."""


class LevelUnavailableError(ProfilerError):
    """A requested level cannot be recorded in this build or on this machine."""


class XSPWarning(UserWarning):
    """Something was recorded differently from what was asked (e.g. G dropped by gpu_fallback)."""
