"""xsp's exception and warning classes.

They are defined by the C core (xsp._core), which raises them from inside a session's start and
stop, and re-exported here:

    ProfilerError            a session cannot start or stop as asked (the base of the next five)
      LevelUnavailableError  a requested level cannot be recorded in this build or on this machine
        GPUError             level G in particular: CUPTI, the device or the build
      SessionActiveError     another profile is recording (one session at a time per process)
      SessionStateError      not in a state for this call: already run, not recording, or called
                             from another thread than the one that started it
      SourceError            a recorder (the torch callback, the module wrapper) refused to start
      TraceLostError         stop could not make the trace (out of memory while merging)
    TraceFormatError         a trace file is truncated, corrupt or foreign (.path, .offset)
    XSPWarning               something was recorded differently from what was asked
"""
from xsp._core import (GPUError, LevelUnavailableError, ProfilerError, SessionActiveError,
                    SessionStateError, SourceError, TraceFormatError, TraceLostError, XSPWarning)

__all__ = ["ProfilerError", "LevelUnavailableError", "GPUError", "SessionActiveError",
           "SessionStateError", "SourceError", "TraceLostError", "TraceFormatError",
           "XSPWarning"]
