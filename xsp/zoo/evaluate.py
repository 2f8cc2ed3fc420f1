"""xsp.zoo.evaluate: one evaluation of a zoo entry, in the current process (issue 26).

An evaluation is one (entry, batch size) on one system: the model is built (random weights,
catalog.Entry.build), its inputs made for the batch size, and its task run through XSP's
leveled measurement, xsp.measure, at the entry's levels:

    inference   model(inputs) under torch.no_grad(), the model in eval mode
    train       a training step: gradients cleared, a forward, catalog.loss_of (the mean of
                the output's first floating-point tensor), a backward (catalog.train_step),
                then an SGD step (lr 1e-3; none for a model without parameters)

The measurement protocol is fixed (WARMUP, REPEAT below, one round, xsp.measure's trim): two
unprofiled warm-up calls, then one run per prefix of the levels (M; M+L; M+L+G), each a
priming call and ten measured calls.  Ten samples give a trimmed mean that one slow call does
not move (trim 0.1 drops one at each end) at a cost of 2 + 11 x runs calls: for the small zoo's
models, well under a second per evaluation.  The protocol is part of the evaluation's key, so
that changing it here re-measures what was measured the old way.  The entry's options
(record_shapes, profile_memory, with_stack) go to every run's profile; the model, when it is
an nn.Module, is named as the profile's model (its call is the M-level model span whatever
its class).  The model runs on the GPU when torch sees one (entry.build(device="cuda")), else
on the CPU; "device" in the row's options says which.

Around the measurement an EnergyMeter (system.EnergyMeter) meters the interval; throughput
is batch_size / the latency of the shallowest run (M), and cost per million samples comes
from the system's price per hour (the manifest's [system] price_per_hour).  The deepest run's
trace is saved as <results>/traces/<evaluation_id>.xsp, then the rows are written by
store.write_evaluation (detail tables first, the evaluations row last: a reader sees the
evaluation whole or not at all, whenever the process dies).

Identity.  key() is the resume key, a string of the entry's key (name and a digest of what is
built and how), the batch size, the levels, the system id and the protocol;
evaluation_id() is its file name: readable ("<model>-b<batch>-<levels>-") and a digest of
the key, the same in every process, so that an evaluation that failed and is run again
replaces its former rows and trace rather than adding rows beside them.

failure_row() makes the row of an evaluation that did not finish (status failed, timeout or
killed, its reason and output tail, empty tables): the runner writes it for what it saw from
outside (a timeout, a crash), the worker for what it caught inside (EvaluationError).

This module imports torch and xsp's analyses only when an evaluation runs.
"""
import datetime as _dt
import hashlib
import json
import os
import re
import socket
import time
import traceback

from . import store as _store

__all__ = ["evaluate", "key", "evaluation_id", "failure_row", "write_failure",
           "EvaluationError", "WARMUP", "REPEAT", "SGD_LR", "TRACES"]

WARMUP = 2          # unprofiled calls before the runs
REPEAT = 10         # measured calls per run (after its priming call)
SGD_LR = 1e-3       # the training step's optimizer
TRACES = "traces"   # folder of the saved traces in the results directory
_PROTOCOL = "warmup=%d,repeat=%d" % (WARMUP, REPEAT)
_NOT_ID = re.compile(r"[^A-Za-z0-9._-]+")


class EvaluationError(RuntimeError):
    """An evaluation that raised: .phase is where ("build", "input", "run", "write"), .reason
    the one-line text of the exception ("build: ValueError: boom"), .details its traceback;
    the original exception is the __cause__."""

    def __init__(self, phase, exc):
        self.phase = phase
        self.reason = "%s: %s" % (phase, _one_line(exc))
        self.details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        super().__init__(self.reason)


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (": " + text[0] if text else "")


def _system_id(system):
    return None if system is None else system.get("system_id")


def key(entry, batch_size, system_id, levels=None):
    """The resume key of an evaluation: entry.key(), the batch size, the levels (the entry's
    by default), the system id and the measurement protocol, '|'-separated."""
    levels = entry.levels if levels is None else levels
    return "%s|batch_size=%d|levels=%s|system=%s|%s" % (entry.key(), int(batch_size), levels,
                                                        system_id, _PROTOCOL)


def evaluation_id(entry, batch_size, system_id, levels=None):
    """The evaluation's id and file name: "<model>-b<batch>-<levels>-<12 hex digits of the
    key's sha256>", the model's name cut to 80 characters of letters, digits, '.', '_', '-'."""
    levels = entry.levels if levels is None else levels
    name = _NOT_ID.sub("_", entry.name).lstrip("._-")[:80] or "model"
    digest = hashlib.sha256(key(entry, batch_size, system_id, levels).encode()).hexdigest()
    return "%s-b%d-%s-%s" % (name, int(batch_size), levels, digest[:12])


def _options(entry, device):
    return json.dumps({**entry.options_dict, "warmup": WARMUP, "repeat": REPEAT,
                       "device": device}, sort_keys=True)


def _identity(entry, batch_size, system):
    sid = _system_id(system)
    return {"evaluation_id": evaluation_id(entry, batch_size, sid),
            "key": key(entry, batch_size, sid), "model": entry.name, "family": entry.family,
            "source": entry.source, "task": entry.task, "batch_size": int(batch_size),
            "levels": entry.levels, "system_id": sid,
            "hostname": (system or {}).get("hostname") or socket.gethostname()}


def failure_row(entry, batch_size, system, status, reason, *, output_tail=None,
                started_at=None, wall_s=None, price_per_hour=None, device=None):
    """The evaluations row of an evaluation that did not finish: status "failed", "timeout"
    or "killed", reason (one line), the tail of its output, when it started (an aware
    datetime or epoch seconds) and how long it ran; system: the fingerprint it was keyed by."""
    if status not in _store.STATUSES or status == "ok":
        raise ValueError("a failure's status is failed, timeout or killed, not %r" % (status,))
    row = _identity(entry, batch_size, system)
    if device is None:              # where the evaluation would have run
        device = "cuda" if (system or {}).get("gpu_count") else "cpu"
    row.update(status=status, reason=reason, output_tail=output_tail,
               started_at=started_at if started_at is not None else time.time(),
               wall_s=wall_s, warmup=WARMUP, repeat=REPEAT, price_per_hour=price_per_hour,
               options=_options(entry, device))
    return row


def write_failure(results_dir, row):
    """Writes a failure_row with empty tables (removing the detail files and the trace a
    former attempt of the same evaluation left); returns the row."""
    _store.write_evaluation(results_dir, row, {})
    _unlink(os.path.join(os.fspath(results_dir), TRACES, row["evaluation_id"] + ".xsp"))
    return row


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _task_fn(entry, model, inputs, torch):
    """The workload of one call: inference or a training step."""
    from . import catalog
    if entry.task == "train":
        params = [p for p in model.parameters() if p.requires_grad] \
            if hasattr(model, "parameters") else []
        opt = torch.optim.SGD(params, lr=SGD_LR) if params else None

        def step():
            catalog.train_step(model, inputs)
            if opt is not None:
                opt.step()
        return step
    return lambda: catalog.call(model, inputs)


def evaluate(entry, batch_size, results_dir, *, system=None, price_per_hour=None):
    """Runs one evaluation of entry at batch_size here, in this process, writes its rows and
    trace into results_dir and returns its evaluations row (a dict).  system: the fingerprint
    to key and describe it by (default system.fingerprint() of this process; the runner passes
    its own so that every worker keys alike); price_per_hour: the system's price, for
    cost_per_million.  A failure raises EvaluationError (its phase, the exception's text and
    traceback; nothing of this evaluation is written, what a former attempt wrote stays); the
    caller writes the failure row (failure_row, write_failure) if it wants one."""
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    results_dir = os.fspath(results_dir)
    phase = "build"
    try:
        import torch

        import xsp
        from . import system as _system
        if system is None:
            system = _system.fingerprint(torch=torch)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model, make_input = entry.build(device=None if device == "cpu" else device)
        phase = "input"
        inputs = make_input(int(batch_size))
        phase = "run"
        fn = _task_fn(entry, model, inputs, torch)
        opts = entry.options_dict
        kwargs = {"model": model} if isinstance(model, torch.nn.Module) else {}
        meter = _system.EnergyMeter()
        with torch.no_grad() if entry.task == "inference" else _nullcontext():
            meter.start()
            t_measure = time.perf_counter()
            try:
                m = xsp.measure(fn, levels=entry.levels, warmup=WARMUP, repeat=REPEAT,
                                batch_size=int(batch_size), progress=False, name=entry.name,
                                **opts, **kwargs)
            finally:
                measure_s = time.perf_counter() - t_measure
                meter.stop()
        phase = "write"
        ident = _identity(entry, batch_size, system)
        eid = ident["evaluation_id"]
        trace_rel = os.path.join(TRACES, eid + ".xsp")
        os.makedirs(os.path.join(results_dir, TRACES), exist_ok=True)
        m.trace.save(os.path.join(results_dir, trace_rel))
        ident.pop("model"), ident.pop("batch_size")
        row, tables = _store.rows_from_measurement(
            m, model=entry.name, batch_size=int(batch_size), system=system, energy=meter,
            price_per_hour=price_per_hour, started_at=started, trace_path=trace_rel,
            options=_options(entry, device), torch_threads=int(torch.get_num_threads()),
            **ident)
        row["measure_s"] = measure_s
        row["wall_s"] = time.perf_counter() - t0
        _store.write_system(results_dir, system)
        _store.write_evaluation(results_dir, row, tables)
        return row
    except EvaluationError:
        raise
    except (Exception, SystemExit) as exc:     # a Ctrl-C is the caller's, not a failure
        raise EvaluationError(phase, exc) from exc


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
