"""xsp.zoo.catalog: the models a zoo holds (issue 26) -- manifests, sources, the built-in zoo.

A zoo is a list of entries; an entry says what one model is and how it is evaluated:

    name, family      "resnet-50", "cnn"
    source            where the model comes from, one of
                        hf:CONFIG_CLASS        a transformers config class, with `config`
                                               arguments and an optional `model_class`
                                               (default AutoModel; e.g.
                                               AutoModelForImageClassification, T5EncoderModel)
                        timm:NAME              timm.create_model(NAME, pretrained=False)
                        torchvision:NAME       torchvision.models.get_model(NAME, weights=None)
                        python:FILE.py:FUNC    FUNC(**config) -> (model, make_input), from a
                        python:pkg.mod:FUNC    file (relative to the manifest) or a module
    input             what make_input(batch_size) makes: {shape = [3, 224, 224], dtype =
                      "float32"}, {seq_len = 128} (token ids below the config's vocab_size, or
                      `vocab`), `name` the forward keyword; or "python:FILE.py:FUNC", a
                      make_input of one's own.  Without it: from the config (an image of its
                      image_size, a waveform of 1 s at 16 kHz, Whisper's 30 s of mel frames,
                      128 token ids) or, for timm, from the model's pretrained_cfg
    task              "inference" (eval mode) or "train" (train mode: a step is a forward,
                      a loss -- `loss_of` -- and a backward: `train_step`)
    batch_sizes, levels ("M", "ML" or "MLG"), timeout (seconds), options (record_shapes,
                      profile_memory, with_stack: those of xsp.profile)

A manifest is TOML (tomllib): top-level keys give the defaults of every model, `[system]` is
kept as it is (price_per_hour and whatever else: not read here), and `[[models]]` tables list
the models.  A `[[models]]` table with a built-in name and no source starts from that built-in
entry.  `load("resnet-50,hf:BertConfig,python:m.py:make")`, the `--models` form, gives the same
entries as a manifest that lists them.

    batch_sizes = [1, 8]
    levels = "ML"
    [system]
    price_per_hour = 1.20
    [[models]]
    name = "resnet-50"                  # the built-in one, with its own batch sizes
    batch_sizes = [1, 32]
    [[models]]
    name = "bert-6l"
    source = "hf:BertConfig"
    config = {num_hidden_layers = 6}
    input = {seq_len = 256}
    task = "train"

Everything that can be told without running a model is checked when a zoo is loaded, before
anything runs, and a problem raises ZooError naming the file, the model and the field: unknown
keys (with the nearest known one), wrong types, unknown source kinds, config classes or model
classes, config arguments that neither the config class nor its model code knows (transformers
itself accepts any keyword and ignores a misspelt one), configs that transformers refuses,
python: files or modules that do not exist and functions they do not define (read with `ast`,
not run: a user's code runs in its evaluation's own process).  A timm or torchvision source
parses everywhere and fails at build() with a ZooError saying the package is missing and why:
here timm cannot import, since it needs torchvision, whose PyPI wheels are CUDA builds that do
not load against the CPU torch.

The built-in zoo (`builtin`, `load("builtin")`) is the table _BUILTIN below, data in the form a
manifest has: 94 real architectures in 11 families (cnn 12, mobile 7, vit 18, encoder 21,
decoder 15, seq2seq 2, ssm 1, rnn 8, speech 8, gnn 1, recommender 1), from transformers' config
classes (vision, text, speech) and from torch.nn models defined at the end of this module
(LSTM/GRU/RNN language models, a BiLSTM classifier, DeepSpeech2, a GCN, DLRM).  Sizes are
real: a config class's defaults where they are a published model (its docstring names it:
resnet-50, vit-base, ...), otherwise a named published size set in `config` (resnet-18,
Llama-3.2-1B, Qwen2-0.5B, ...).  mistral-7b (29 GB in float32) needs more memory than this
24 GiB machine has and fails here as an evaluation, as any model too large for a machine does.

Small versions.  Built at full size, the 94 models take far longer than a test may on a 2-core
CPU (and more memory than it has), so every built-in entry also carries `small`: config (and
input) overrides that keep the architecture -- its layer types, their order, its attention,
conv and recurrence patterns -- and cut widths, depths, vocabularies and inputs.
`Entry.shrunk()` is that entry ("resnet-50" -> "resnet-50@small", a name that load() knows for
every built-in entry); `Entry.build(small=True)` builds it.  The tests build every built-in
entry small and run a forward; the full sizes are built on the meta device (the structure
without memory), which checks their model classes and parameter counts (the published ones) in
seconds; a few cheap ones are built and run at full size.  `builtin-small` (`builtin_small`)
is the shrunk versions of the twelve models of _SMALL_ZOO, of nine families, each forward
0.5-30 ms here, so that its evaluation at levels ML over batch sizes 1 and 8 takes well under
5 minutes on this 2-core CPU; the measured forward times are beside _SMALL_ZOO.  At these sizes
a forward is dominated by the cost of dispatching each op, not by its arithmetic: builtin-small
shows the pipeline and each architecture's structure (its layer types and ops), not the full
models' time shares.

Every build seeds torch with torch.manual_seed(0) and makes random weights: nothing is
downloaded, no hub is asked.  This module is not imported by `import xsp`; it imports torch and
transformers only when a model is built or a source checked.
"""
import ast
import contextlib
import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import tomllib

__all__ = ["ZooError", "Entry", "Zoo", "load", "list_text", "check", "call", "loss_of",
           "train_step", "KINDS", "TASKS", "LEVELS", "OPTIONS", "DEFAULTS"]

KINDS = ("hf", "timm", "torchvision", "python")
TASKS = ("inference", "train")
LEVELS = ("M", "ML", "MLG")          # the leveled measurement's runs are prefixes of MLG
# xsp.profile's options that an evaluation takes, with their defaults
OPTIONS = {"record_shapes": False, "profile_memory": False, "with_stack": False}
# what a model has when neither it nor its manifest says otherwise
DEFAULTS = {"batch_sizes": (1, 8), "levels": "ML", "task": "inference", "timeout": 600.0}

_TOP_KEYS = ("batch_sizes", "levels", "task", "timeout") + tuple(OPTIONS) + ("system", "models")
_MODEL_KEYS = ("name", "family", "source", "model_class", "config", "input", "task",
               "batch_sizes", "levels", "timeout") + tuple(OPTIONS) + ("small",)
_INPUT_KEYS = ("shape", "dtype", "seq_len", "vocab", "name")
_SMALL_KEYS = ("config", "input")
_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32")


class ZooError(ValueError):
    """A zoo that cannot be evaluated as written: a manifest, a --models string or a source
    that is wrong, or a model whose package is missing.  .where (the file, "--models" or
    "builtin"), .model (its name, or None) and .field (the key, or None) say where."""

    def __init__(self, message, where=None, model=None, field=None):
        super().__init__(message)
        self.where, self.model, self.field = where, model, field


def _error(where, model, field, problem):
    label = None
    if model is not None:     # a model without a name is told by its place: "model #3"
        label = "model %s" % model if model.startswith("#") else "model %r" % (model,)
    parts = [p for p in (where, label, field) if p]
    return ZooError(": ".join(parts + [problem]), where, model, field)


# -- frozen values: an Entry is hashable and compares by value --------------------------------

class _FrozenMap(tuple):
    """A dict as a sorted tuple of (key, value) pairs, told apart from a list of pairs so that
    it thaws back to a dict."""
    __slots__ = ()


def _freeze(v):
    if isinstance(v, dict):
        return _FrozenMap(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _thaw(v):
    if isinstance(v, _FrozenMap):
        return {k: _thaw(x) for k, x in v}
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


# -- the entry ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Entry:
    """One model of a zoo and how it is evaluated (see the module docstring).  A value: made
    by load() and the parsers, compared and hashed by its fields.  config, input and small are
    frozen (config_dict, input_spec and small_dict give them back as dicts); options holds the
    profile options that differ from their defaults, as sorted (key, value) pairs."""
    name: str
    family: str
    source: str
    task: str = "inference"
    batch_sizes: tuple = DEFAULTS["batch_sizes"]
    levels: str = "ML"
    options: tuple = ()
    timeout_s: float = DEFAULTS["timeout"]
    config: tuple = _FrozenMap()
    input: object = None            # None (from the config), a frozen table or "python:...:fn"
    model_class: str = None         # hf sources only; None is AutoModel
    small: tuple = _FrozenMap()     # {"config": {...}, "input": {...}}: what shrunk() changes

    @property
    def kind(self):
        return self.source.split(":", 1)[0]

    @property
    def config_dict(self):
        return _thaw(self.config)

    @property
    def input_spec(self):
        return _thaw(self.input) if isinstance(self.input, _FrozenMap) else self.input

    @property
    def small_dict(self):
        return _thaw(self.small)

    @property
    def options_dict(self):
        """Every profile option with its value, the defaults included."""
        return {**OPTIONS, **dict(self.options)}

    def key(self):
        """A stable string identity of what would be evaluated: the name and a digest of the
        source, model class, config, input, task and options (not the batch sizes, levels and
        timeout, which the runner keys by itself).  The same in every process and Python."""
        what = {"name": self.name, "source": self.source, "model_class": self.model_class,
                "config": self.config_dict, "input": self.input_spec, "task": self.task,
                "options": dict(self.options)}
        text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
        return "%s#%s" % (self.name, hashlib.sha256(text.encode()).hexdigest()[:16])

    def shrunk(self):
        """This entry with its `small` overrides applied ("@small" added to its name), or the
        entry itself when it has none."""
        if not self.small:
            return self
        small = self.small_dict
        config = {**self.config_dict, **small.get("config", {})}
        inp = self.input_spec
        if "input" in small:
            inp = dict(inp) if isinstance(inp, dict) else {}
            for given, other in (("shape", "seq_len"), ("seq_len", "shape")):
                if given in small["input"]:
                    inp.pop(other, None)
            inp.update(small["input"])
        return dataclasses.replace(self, name=self.name + "@small", config=_freeze(config),
                                   input=None if inp is None else _freeze(inp),
                                   small=_FrozenMap())

    def build(self, small=False, device=None):
        """(model, make_input): the model with random weights (torch.manual_seed(0) first), in
        eval mode for inference and train mode for a training step; make_input(batch_size)
        gives the forward's inputs (a tensor, a tuple or a dict of keyword arguments, the same
        values at each call).  small: build shrunk() instead.  device: make the model and the
        inputs there ("meta": the structure without memory, for parameter counts).  A package
        that cannot be imported raises ZooError; what the model's own code raises is raised."""
        if small:
            return self.shrunk().build(device=device)
        import torch
        torch.manual_seed(0)
        builder = {"hf": _build_hf, "timm": _build_timm, "torchvision": _build_torchvision,
                   "python": _build_python}[self.kind]
        with torch.device(device) if device is not None else contextlib.nullcontext():
            model, make_input, default_input = builder(self)
        spec = self.input_spec
        if isinstance(spec, str):
            make_input = _load_function(_python_target(spec), self.name, "input")
        elif spec is not None or default_input is not None:
            if spec is None or ("shape" not in spec and "seq_len" not in spec):
                spec = {**default_input, **(spec or {})}     # the rest from the config
            hf = self.kind == "hf"
            make_input = _tensor_input(spec, getattr(model, "main_input_name", None) if hf
                                       else None,
                                       getattr(model.config, "vocab_size", None) if hf
                                       else None, self)
        if device is not None:
            make_input = _moved(make_input, device)
        if hasattr(model, "train"):
            model.train(self.task == "train")
        return model, make_input


@dataclasses.dataclass(frozen=True)
class Zoo:
    """The models to evaluate (.entries, a tuple of Entry), the manifest's [system] table
    (.system, a dict, empty without one) and the manifest's path (.path, None for the built-in
    zoos and --models strings)."""
    entries: tuple
    system: dict = dataclasses.field(default_factory=dict, hash=False, compare=True)
    path: str = None

    def __len__(self):
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __getitem__(self, name):
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    @property
    def names(self):
        return [e.name for e in self.entries]

    def override(self, *, batch_sizes=None, levels=None, task=None, timeout=None,
                 options=None):
        """A new Zoo whose every entry takes the values given (the command line's
        --batch-sizes, --levels, --task, --timeout and profile options), checked as a
        manifest's are; raises ZooError."""
        where = "override"
        fields = {}
        if batch_sizes is not None:
            fields["batch_sizes"] = _batch_sizes(list(batch_sizes), where, None)
        if levels is not None:
            fields["levels"] = _levels(levels, where, None)
        if task is not None:
            fields["task"] = _task(task, where, None)
        if timeout is not None:
            fields["timeout_s"] = _timeout(timeout, where, None)
        entries = []
        for e in self.entries:
            f = dict(fields)
            if options is not None:
                opts = e.options_dict
                for k, v in options.items():
                    if k not in OPTIONS:
                        raise _unknown_key(k, tuple(OPTIONS), where, None, "options")
                    opts[k] = _bool(v, where, None, k)
                f["options"] = _options(opts)
            entries.append(dataclasses.replace(e, **f))
        return Zoo(tuple(entries), dict(self.system), self.path)

    def __repr__(self):
        families = sorted({e.family for e in self.entries})
        return "<xsp.zoo.Zoo %d models (%s)%s>" % (
            len(self.entries), ", ".join(families), " from %s" % self.path if self.path else "")


# -- loading -----------------------------------------------------------------------------------

def load(spec):
    """The Zoo that spec names: "builtin", "builtin-small", a manifest (a path ending in .toml)
    or a --models string (a comma-separated list of built-in names, NAME@small,
    "builtin"/"builtin-small" and sources).  Every entry that is not a built-in one as it
    stands is checked (check()) before the zoo is returned; raises ZooError."""
    if not isinstance(spec, (str, os.PathLike)):
        raise ZooError("a zoo is 'builtin', 'builtin-small', a .toml manifest or a --models "
                       "string, not %r" % (spec,))
    spec = os.fspath(spec)
    if spec == "builtin":
        return _builtin()
    if spec == "builtin-small":
        return _builtin_small()
    if spec.endswith(".toml"):
        return _load_manifest(spec)
    return _load_models_string(spec)


def list_text(zoo):
    """One model a line, in columns: name, family, source, batch sizes."""
    rows = [(e.name, e.family, e.source, ",".join(str(b) for b in e.batch_sizes))
            for e in zoo.entries]
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("%-*s  %-*s  %-*s  %s" % (widths[0], r[0], widths[1], r[1], widths[2],
                                               r[2], r[3]) for r in rows) + "\n"


def check(zoo_or_entries, where=None):
    """The checks that need the sources themselves (config classes and their arguments, model
    classes, python: files, modules and functions), on every entry; raises ZooError for the
    first one that fails.  load() runs it on what it reads; the built-in zoo is checked by the
    tests."""
    entries = getattr(zoo_or_entries, "entries", zoo_or_entries)
    for e in entries:
        _check_entry(e, where)


def _load_manifest(path):
    where = path
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ZooError("%s: no such manifest" % (path,), where) from None
    except OSError as exc:
        raise ZooError("%s: cannot read the manifest: %s" % (path, exc.strerror), where) from None
    except tomllib.TOMLDecodeError as exc:
        raise ZooError("%s: not valid TOML: %s" % (path, exc), where) from None
    for k in doc:
        if k not in _TOP_KEYS:
            raise _unknown_key(k, _TOP_KEYS, where, None)
    defaults = _defaults(doc, where)
    system = doc.get("system", {})
    if not isinstance(system, dict):
        raise _error(where, None, "system", "expected a table, got %s" % _tname(system))
    models = doc.get("models")
    if models is None:
        raise _error(where, None, "models", "the manifest lists no models ([[models]] tables)")
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise _error(where, None, "models", "expected [[models]] tables, got %s" %
                     _tname(models))
    base = os.path.dirname(os.path.abspath(path))
    entries = [_parse_model(m, i, defaults, where, base) for i, m in enumerate(models)]
    _no_duplicates(entries, where)
    check([e for e in entries if _lookup(e.name) != e], where)
    return Zoo(tuple(entries), system, path)


def _load_models_string(text):
    where = "--models"
    items = [s.strip() for s in text.split(",")]
    if not text.strip():
        raise ZooError("--models: empty: give built-in names or sources, comma-separated",
                       where)
    entries = []
    for i, item in enumerate(items):
        if not item:
            raise ZooError("--models: item %d is empty" % (i + 1), where)
        if item == "builtin":
            entries.extend(_builtin().entries)
        elif item == "builtin-small":
            entries.extend(_builtin_small().entries)
        elif ":" in item:
            entries.append(_parse_model({"source": item}, i, {}, where, os.getcwd()))
        else:
            entries.append(_parse_model({"name": item}, i, {}, where, os.getcwd()))
    _no_duplicates(entries, where)
    check([e for e in entries if _lookup(e.name) != e], where)
    return Zoo(tuple(entries), {}, None)


def _no_duplicates(entries, where):
    seen = set()
    for e in entries:
        if e.name in seen:
            raise _error(where, e.name, "name", "two models have this name")
        seen.add(e.name)


# -- parsing and the checks of single fields ---------------------------------------------------

def _tname(v):
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(v), type(v).__name__)


def _unknown_key(key, known, where, model, table=None):
    """The error of a key that a table does not take (table: the field it is in, or None for
    the manifest's top level and a model's own table)."""
    near = difflib.get_close_matches(str(key), list(known), n=1)
    hint = " (did you mean %r?)" % near[0] if near else ""
    field = "%s.%s" % (table, key) if table else str(key)
    return _error(where, model, field, "unknown key%s; known: %s" % (hint, ", ".join(known)))


def _batch_sizes(v, where, model):
    if (not isinstance(v, list) or not v or
            not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in v)):
        raise _error(where, model, "batch_sizes",
                     "expected a non-empty list of positive integers, got %r" % (v,))
    if len(set(v)) != len(v):
        raise _error(where, model, "batch_sizes", "a batch size is listed twice: %r" % (v,))
    return tuple(v)


def _levels(v, where, model):
    if not isinstance(v, str) or v.upper() not in LEVELS:
        raise _error(where, model, "levels", "expected one of %s, got %r" % (
            ", ".join(repr(x) for x in LEVELS), v))
    return v.upper()


def _task(v, where, model):
    if v not in TASKS:
        raise _error(where, model, "task", "expected one of %s, got %r" % (
            ", ".join(repr(x) for x in TASKS), v))
    return v


def _timeout(v, where, model):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or math.isinf(v):
        raise _error(where, model, "timeout", "expected a positive number of seconds, got %r"
                     % (v,))
    return float(v)


def _bool(v, where, model, key):
    if not isinstance(v, bool):
        raise _error(where, model, key, "expected true or false, got %r" % (v,))
    return v


def _str(v, where, model, key):
    if not isinstance(v, str) or not v.strip():
        raise _error(where, model, key, "expected a non-empty string, got %r" % (v,))
    return v


def _options(opts):
    return tuple(sorted((k, v) for k, v in opts.items() if v != OPTIONS[k]))


def _defaults(doc, where):
    d = dict(DEFAULTS)
    if "batch_sizes" in doc:
        d["batch_sizes"] = _batch_sizes(doc["batch_sizes"], where, None)
    if "levels" in doc:
        d["levels"] = _levels(doc["levels"], where, None)
    if "task" in doc:
        d["task"] = _task(doc["task"], where, None)
    if "timeout" in doc:
        d["timeout"] = _timeout(doc["timeout"], where, None)
    for k in OPTIONS:
        if k in doc:
            d[k] = _bool(doc[k], where, None, k)
    return d


def _input(v, where, model, field="input"):
    """A checked input table (or python: factory string), or raises."""
    if isinstance(v, str):
        if not v.startswith("python:"):
            raise _error(where, model, field, "expected a table (shape, dtype, seq_len, vocab, "
                         "name) or a python:FILE.py:FUNC factory, got %r" % (v,))
        return v
    if not isinstance(v, dict):
        raise _error(where, model, field, "expected a table (shape, dtype, seq_len, vocab, "
                     "name) or a python:FILE.py:FUNC factory, got %s" % _tname(v))
    for k in v:
        if k not in _INPUT_KEYS:
            raise _unknown_key(k, _INPUT_KEYS, where, model, field)
    if "shape" in v:
        s = v["shape"]
        if (not isinstance(s, list) or
                not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in s)):
            raise _error(where, model, field + ".shape",
                         "expected a list of positive integers (without the batch), got %r"
                         % (s,))
    for k in ("seq_len", "vocab"):
        if k in v and (isinstance(v[k], bool) or not isinstance(v[k], int) or v[k] <= 0):
            raise _error(where, model, "%s.%s" % (field, k),
                         "expected a positive integer, got %r" % (v[k],))
    if "shape" in v and "seq_len" in v:
        raise _error(where, model, field, "give shape or seq_len, not both")
    if "dtype" in v and v["dtype"] not in _DTYPES:
        raise _error(where, model, field + ".dtype", "expected one of %s, got %r" % (
            ", ".join(_DTYPES), v["dtype"]))
    if "name" in v:
        n = v["name"]
        if not isinstance(n, str) or not n.isidentifier():
            raise _error(where, model, field + ".name",
                         "expected a keyword name of the forward, got %r" % (n,))
    return v


def _source(v, where, model, base):
    """The source, checked for its form, with a python: file made absolute."""
    if not isinstance(v, str) or ":" not in v:
        raise _error(where, model, "source", "expected KIND:WHAT with KIND one of %s, got %r"
                     % (", ".join(KINDS), v))
    kind, rest = v.split(":", 1)
    if kind not in KINDS:
        raise _error(where, model, "source", "unknown source kind %r; known: %s" % (
            kind, ", ".join(KINDS)))
    if not rest.strip():
        raise _error(where, model, "source", "%r names nothing after %s:" % (v, kind))
    if kind == "python":
        target, sep, func = rest.rpartition(":")
        if not sep or not target or not func.isidentifier():
            raise _error(where, model, "source", "expected python:FILE.py:FUNCTION or "
                         "python:package.module:FUNCTION, got %r" % (v,))
        if _is_file(target):
            target = os.path.normpath(os.path.join(base, os.path.expanduser(target)))
        elif not all(p.isidentifier() for p in target.split(".")):
            raise _error(where, model, "source", "%r is neither a .py file nor a dotted "
                         "module name" % (target,))
        return "python:%s:%s" % (target, func)
    return v


def _is_file(target):
    return target.endswith(".py") or "/" in target or os.sep in target


def _parse_model(t, index, defaults, where, base):
    label = t.get("name") if isinstance(t.get("name"), str) else None
    label = label or (t.get("source") if isinstance(t.get("source"), str) else None) or \
        "#%d" % (index + 1)
    for k in t:
        if k not in _MODEL_KEYS:
            raise _unknown_key(k, _MODEL_KEYS, where, label)
    if "name" in t:
        _str(t["name"], where, label, "name")
    start = None
    if "source" not in t:
        if "name" not in t:
            raise _error(where, label, "source", "a model needs a source (or a built-in name)")
        start = _lookup(t["name"])
        if start is None:
            near = difflib.get_close_matches(t["name"], _builtin().names + _builtin_small().names,
                                             n=1)
            raise _error(where, label, "name", "unknown model: not a built-in one%s; give a "
                         "source (hf:, timm:, torchvision:, python:) for a model of your own"
                         % (" (did you mean %r?)" % near[0] if near else ""))
        source = start.source
    else:
        source = _source(t["source"], where, label, base)
    name = t.get("name", t.get("source"))
    kind = source.split(":", 1)[0]

    family = t.get("family")
    if family is not None:
        family = _str(family, where, label, "family")
    elif start is not None:
        family = start.family
    else:
        family = _family_of(source)
    model_class = t.get("model_class", start.model_class if start else None)
    if "model_class" in t:
        if kind != "hf":
            raise _error(where, label, "model_class", "only hf: sources take a model class")
        model_class = _str(t["model_class"], where, label, "model_class")
    config = start.config_dict if start else {}
    if "config" in t:
        if not isinstance(t["config"], dict):
            raise _error(where, label, "config", "expected a table, got %s" %
                         _tname(t["config"]))
        if kind in ("timm", "torchvision"):
            raise _error(where, label, "config", "%s: sources take no config" % kind)
        config = {**config, **t["config"]}
    inp = start.input_spec if start else None
    if "input" in t:
        inp = _input(t["input"], where, label)
        if isinstance(inp, str):
            inp = _source(inp, where, label, base)
        elif kind == "python" and "shape" not in inp and "seq_len" not in inp:
            raise _error(where, label, "input", "give its shape or seq_len: a python: "
                         "source's input has nothing to be taken from")
    small = start.small_dict if start else {}
    if "small" in t:
        s = t["small"]
        if not isinstance(s, dict):
            raise _error(where, label, "small", "expected a table, got %s" % _tname(s))
        for k in s:
            if k not in _SMALL_KEYS:
                raise _unknown_key(k, _SMALL_KEYS, where, label, "small")
        if "config" in s and not isinstance(s["config"], dict):
            raise _error(where, label, "small.config", "expected a table, got %s" %
                         _tname(s["config"]))
        if "input" in s:
            _input(s["input"], where, label, "small.input")
            if isinstance(s["input"], str):
                raise _error(where, label, "small.input", "expected a table")
        small = s

    def pick(key, parse, out_default):
        if key in t:
            return parse(t[key], where, label)
        if key in defaults:
            return defaults[key]
        return out_default

    task = pick("task", _task, start.task if start else DEFAULTS["task"])
    batch_sizes = pick("batch_sizes", _batch_sizes,
                       start.batch_sizes if start else DEFAULTS["batch_sizes"])
    levels = pick("levels", _levels, start.levels if start else DEFAULTS["levels"])
    timeout = pick("timeout", _timeout, start.timeout_s if start else DEFAULTS["timeout"])
    opts = start.options_dict if start else dict(OPTIONS)
    for k in OPTIONS:
        if k in t:
            opts[k] = _bool(t[k], where, label, k)
        elif k in defaults:
            opts[k] = defaults[k]
    return Entry(name=name, family=family, source=source, task=task, batch_sizes=batch_sizes,
                 levels=levels, options=_options(opts), timeout_s=timeout,
                 config=_freeze(config), input=None if inp is None else _freeze(inp),
                 model_class=model_class, small=_freeze(small))


def _family_of(source):
    """The family of a source given without one: a built-in entry's of the same hf config
    class, else the source's kind."""
    kind = source.split(":", 1)[0]
    if kind == "hf":
        for row in _BUILTIN:
            if row[2] == source:
                return row[1]
    return kind


# -- the checks that read the sources ----------------------------------------------------------

def _check_entry(e, where):
    where = where or "zoo"
    if e.kind == "hf":
        _check_hf(e, where)
    elif e.kind == "python":
        _check_python(e.source, e, where, "source", e.config_dict)
        small = e.small_dict.get("config")
        if small:
            _check_python(e.source, e, where, "source", small, "small.config")
    if isinstance(e.input, str):
        _check_python(e.input, e, where, "input", None)


@functools.lru_cache(maxsize=None)
def _transformers_or_none():
    if importlib.util.find_spec("transformers") is None:
        return None
    try:
        return importlib.import_module("transformers")
    except Exception:                    # a broken install: build() says why
        return None


def _check_hf(e, where):
    tf = _transformers_or_none()
    if tf is None:
        return                           # build() raises the ZooError that says it is missing
    cls_name = e.source.split(":", 1)[1]
    cls = getattr(tf, cls_name, None) if cls_name.isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, tf.PretrainedConfig)):
        near = difflib.get_close_matches(cls_name, [n for n in dir(tf) if n.endswith("Config")],
                                         n=1)
        raise _error(where, e.name, "source", "unknown config class %r: transformers %s has no "
                     "such configuration class%s" % (cls_name, tf.__version__,
                                                      " (did you mean %r?)" % near[0]
                                                      if near else ""))
    config = e.config_dict
    small = e.small_dict.get("config", {})
    for field, cfg in (("config", config), ("small.config", small)):
        for k in cfg:
            if not _config_knows(cls, k):
                raise _error(where, e.name, "%s.%s" % (field, k),
                             "unknown config argument: neither %s nor its model's code has "
                             "it" % cls_name)
    made = _made_config(cls, config, where, e, "config")
    if small:
        _made_config(cls, {**config, **small}, where, e, "small.config")
    if e.model_class is not None:
        mc = getattr(tf, e.model_class, None) if e.model_class.isidentifier() else None
        if not isinstance(mc, type):
            raise _error(where, e.name, "model_class", "unknown model class %r: transformers "
                         "%s has no such class" % (e.model_class, tf.__version__))
        mapping = getattr(mc, "_model_mapping", None)
        if mapping is not None:
            try:
                ok = type(made) in mapping
            except Exception:
                ok = True
            if not ok:
                raise _error(where, e.name, "model_class", "%s has no model for %s" % (
                    e.model_class, cls_name))


def _made_config(cls, config, where, e, field):
    try:
        return cls(**config)
    except Exception as exc:             # transformers' validators raise several kinds
        raise _error(where, e.name, field, "%s refuses it: %s" % (
            cls.__name__, _one_line(exc))) from None


def _one_line(exc):
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _config_knows(cls, key):
    """Whether a transformers config class takes `key`: a parameter of its __init__, an
    attribute of its default instance, or a name its package's code reads as config.KEY or
    "KEY" (the models read some arguments with getattr(config, "KEY", default), e.g.
    DeBERTa-v2's position_buckets)."""
    if key in inspect.signature(cls.__init__).parameters:
        return True
    if hasattr(_default_config(cls), key):
        return True
    pattern = r"config\.%s\b|[\"']%s[\"']" % (re.escape(key), re.escape(key))
    return re.search(pattern, _package_text(cls.__module__)) is not None


@functools.lru_cache(maxsize=None)
def _default_config(cls):
    return cls()


@functools.lru_cache(maxsize=None)
def _package_text(module):
    folder = os.path.dirname(sys.modules[module].__file__)
    texts = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                texts.append(f.read())
    return "\n".join(texts)


def _python_target(source):
    target, _, func = source[len("python:"):].rpartition(":")
    return target, func


def _check_python(source, e, where, field, config, config_field="config"):
    target, func = _python_target(source)
    if _is_file(target):
        if not os.path.isfile(target):
            raise _error(where, e.name, field, "%s: no such file" % (target,))
        path = target
    else:
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            raise _error(where, e.name, field, "module %r cannot be found: %s" % (
                target, _one_line(exc))) from None
        if spec is None:
            raise _error(where, e.name, field, "no module named %r" % (target,))
        path = spec.origin
        if not path or not path.endswith(".py") or not os.path.isfile(path):
            return                       # an extension or namespace module: build() tells
    tree = _parse_py(path, os.path.getmtime(path))
    if isinstance(tree, str):
        raise _error(where, e.name, field, "%s cannot be parsed: %s" % (path, tree))
    node = _top_level(tree, func)
    if node is None:
        raise _error(where, e.name, field, "%s defines no function %r" % (path, func))
    if config and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
            node.args.kwarg is None:
        params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
        for k in config:
            if k not in params:
                raise _error(where, e.name, "%s.%s" % (config_field, k), "%s() takes no "
                             "argument %r (it takes %s)" % (func, k, ", ".join(params) or
                                                            "none"))


@functools.lru_cache(maxsize=64)
def _parse_py(path, mtime):
    try:
        with open(path, "rb") as f:
            return ast.parse(f.read(), path)
    except (SyntaxError, ValueError, OSError) as exc:
        return _one_line(exc)


def _top_level(tree, name):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                node.target.id == name:
            return node
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return node
    return None


# -- building ----------------------------------------------------------------------------------

_WHY = {"timm": "timm needs torchvision, whose PyPI wheels are CUDA builds that do not load "
                "against a CPU build of torch; timm: sources build where timm imports",
        "torchvision": "torchvision's PyPI wheels are CUDA builds that do not load against a "
                       "CPU build of torch; torchvision: sources build where it imports",
        "transformers": "install xsp's zoo extra: pip install 'xsp[zoo]'"}


def _import(package, e):
    try:
        return importlib.import_module(package)
    except Exception as exc:            # ImportError, or a broken binary's RuntimeError/OSError
        raise ZooError("%s: %s: the package %s cannot be imported here (%s): %s" % (
            e.name, e.source, package, _one_line(exc), _WHY[package]),
            None, e.name, "source") from None


def _build_hf(e):
    tf = _import("transformers", e)
    cls_name = e.source.split(":", 1)[1]
    cls = getattr(tf, cls_name, None)
    if cls is None:
        raise ZooError("%s: unknown config class %r" % (e.name, cls_name), None, e.name,
                       "source")
    config = cls(**e.config_dict)
    if config.architectures is None:
        # transformers' Auto classes iterate over it when a config has several models
        # (DeiT's, LeViT's: the classifier with and without its teacher's head)
        config.architectures = []
    mc_name = e.model_class or "AutoModel"
    mc = getattr(tf, mc_name)
    model = mc.from_config(config) if mc_name.startswith("Auto") else mc(config)
    return model, None, _hf_default_input(config, model)


def _hf_default_input(config, model):
    """The input a transformers model takes when the entry gives none."""
    name = getattr(model, "main_input_name", "input_ids")
    if name == "pixel_values":
        size = getattr(config, "image_size", None) or 224
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        return {"shape": [getattr(config, "num_channels", 3), h, w]}
    if name == "input_features":         # Whisper: 30 s of mel frames, 2 per encoder position
        return {"shape": [config.num_mel_bins, 2 * config.max_source_positions]}
    if name == "input_values":
        if hasattr(config, "max_length") and hasattr(config, "num_mel_bins"):
            return {"shape": [config.max_length, config.num_mel_bins]}   # AST's spectrogram
        return {"shape": [16000]}        # 1 s of 16 kHz audio
    return {"seq_len": 128}


def _build_timm(e):
    timm = _import("timm", e)
    model = timm.create_model(e.source.split(":", 1)[1], pretrained=False)
    size = list(getattr(model, "pretrained_cfg", {}).get("input_size", (3, 224, 224)))
    return model, None, {"shape": size}


def _build_torchvision(e):
    tv = _import("torchvision", e)
    model = tv.models.get_model(e.source.split(":", 1)[1], weights=None)
    return model, None, {"shape": [3, 224, 224]}


def _build_python(e):
    fn = _load_function(_python_target(e.source), e.name, "source")
    made = fn(**e.config_dict)
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0]) and
            callable(made[1])):
        raise ZooError("%s: %s returned %s, not (model, make_input)" % (
            e.name, e.source, type(made).__name__), None, e.name, "source")
    return made[0], made[1], None


def _load_function(target, name, field):
    path, func = target
    if _is_file(path):
        modname = "xsp_zoo_%s" % hashlib.sha256(path.encode()).hexdigest()[:12]
        mod = sys.modules.get(modname)
        if mod is None:
            spec = importlib.util.spec_from_file_location(modname, path)
            if spec is None:
                raise ZooError("%s: %s cannot be loaded" % (name, path), None, name, field)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                del sys.modules[modname]
                raise
    else:
        mod = importlib.import_module(path)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise ZooError("%s: %s defines no function %r" % (name, path, func), None, name, field)
    return fn


def _tensor_input(spec, main_name, vocab, e):
    """make_input(batch_size) for an input table: random values (seeded: the same at each
    call) of the shape after the batch; token ids below the vocabulary."""
    import torch
    spec = dict(spec)
    if "seq_len" in spec:
        shape, dtype = [spec["seq_len"]], spec.get("dtype", "int64")
    else:
        shape, dtype = spec["shape"], spec.get("dtype", "float32")
    dt = getattr(torch, dtype)
    name = spec.get("name", main_name)
    high = spec.get("vocab", vocab)
    if not dt.is_floating_point and high is None:
        raise ZooError("%s: an integer input needs input.vocab (the ids' upper bound)" % e.name,
                       None, e.name, "input")

    def make_input(batch_size):
        g = torch.Generator().manual_seed(0)
        size = (batch_size, *shape)
        if dt.is_floating_point:
            t = torch.randn(size, generator=g, device="cpu").to(dt)
        else:
            t = torch.randint(0, high, size, generator=g, dtype=dt, device="cpu")
        return {name: t} if name else t
    return make_input


def _moved(make_input, device):
    def make(batch_size):
        return _to(make_input(batch_size), device)
    return make


def _to(x, device):
    if hasattr(x, "to"):
        return x.to(device)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_to(v, device) for v in x)
    return x


# -- running one step --------------------------------------------------------------------------

def call(model, inputs):
    """model's forward on what make_input gave: a tuple as positional arguments, a dict as
    keyword arguments, anything else as the one argument."""
    if isinstance(inputs, tuple):
        return model(*inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(inputs)


def loss_of(output):
    """The loss of a training step: the mean of the output's first floating-point tensor (a
    tensor, a transformers ModelOutput's first field, a tuple's first element, depth first)."""
    import torch
    stack = [output]
    while stack:
        x = stack.pop(0)
        if isinstance(x, torch.Tensor):
            if x.is_floating_point():
                return x.mean()
        elif isinstance(x, dict):
            stack[:0] = [v for v in x.values() if v is not None]
        elif isinstance(x, (tuple, list)):
            stack[:0] = list(x)
    raise TypeError("the output holds no floating-point tensor to make a loss of: %s" %
                    type(output).__name__)


def train_step(model, inputs):
    """One training step of a `task = "train"` entry: gradients cleared, a forward, loss_of,
    a backward; returns the loss."""
    model.zero_grad(set_to_none=True)
    loss = loss_of(call(model, inputs))
    loss.backward()
    return loss


# -- torch.nn models of the built-in zoo -------------------------------------------------------
# Each factory takes its sizes as keyword arguments (a manifest's `config`) and returns
# (model, make_input); make_input's values are seeded, the same at each call.

def _seeded():
    import torch
    return torch.Generator().manual_seed(0)


def rnn_lm(cell="lstm", vocab=10000, embed=650, hidden=650, layers=2, seq_len=35, dropout=0.5,
           tie=True):
    """The word-level RNN language model of Zaremba et al. (2014) and PyTorch's
    word_language_model example: embedding, a stacked LSTM, GRU or tanh RNN, a linear decoder
    over the vocabulary (its weight tied to the embedding's when the sizes agree).  Input:
    token ids [batch, seq_len]; output: logits [batch, seq_len, vocab]."""
    import torch
    from torch import nn

    class RNNLanguageModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.embedding = nn.Embedding(vocab, embed)
            rnn = {"lstm": nn.LSTM, "gru": nn.GRU}.get(cell)
            if rnn is not None:
                self.rnn = rnn(embed, hidden, layers, dropout=between, batch_first=True)
            else:
                self.rnn = nn.RNN(embed, hidden, layers, nonlinearity=cell[len("rnn_"):],
                                  dropout=between, batch_first=True)
            self.decoder = nn.Linear(hidden, vocab)
            if tie and embed == hidden:
                self.decoder.weight = self.embedding.weight

        def forward(self, ids):
            out, _ = self.rnn(self.drop(self.embedding(ids)))
            return self.decoder(self.drop(out))

    if cell not in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        raise ValueError("cell: lstm, gru, rnn_tanh or rnn_relu, not %r" % (cell,))
    between = dropout if layers > 1 else 0.0     # torch's dropout between recurrent layers

    def make_input(batch_size):
        return torch.randint(0, vocab, (batch_size, seq_len), generator=_seeded())
    return RNNLanguageModel(), make_input


def rnn_classifier(vocab=30000, embed=300, hidden=512, layers=2, classes=5, seq_len=64,
                   dropout=0.3):
    """A bidirectional LSTM sentence classifier (the BiLSTM baselines of SST and GLUE):
    embedding, a stacked bidirectional LSTM, max-pooling over time, a linear classifier.
    Input: token ids [batch, seq_len]; output: logits [batch, classes]."""
    import torch
    from torch import nn

    class BiLSTMClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, embed)
            self.lstm = nn.LSTM(embed, hidden, layers, dropout=dropout, batch_first=True,
                                bidirectional=True)
            self.drop = nn.Dropout(dropout)
            self.classifier = nn.Linear(2 * hidden, classes)

        def forward(self, ids):
            out, _ = self.lstm(self.embedding(ids))
            return self.classifier(self.drop(out.max(dim=1).values))

    def make_input(batch_size):
        return torch.randint(0, vocab, (batch_size, seq_len), generator=_seeded())
    return BiLSTMClassifier(), make_input


def deepspeech2(freq=161, frames=200, channels=32, hidden=800, layers=5, classes=29):
    """DeepSpeech2 (Amodei et al. 2016) as in deepspeech.pytorch: two 2-D convolutions over
    (frequency, time) with batch norm and hardtanh, a stack of bidirectional GRUs (summed
    directions) with batch norm between them, a linear layer to the characters.  Input: a
    spectrogram [batch, 1, freq, frames] (161 bins of a 20 ms window; 200 frames = 2 s);
    output: log-probabilities [batch, frames / 2, classes]."""
    import torch
    from torch import nn

    f1 = (freq + 2 * 20 - 41) // 2 + 1
    f2 = (f1 + 2 * 10 - 21) // 2 + 1

    class BatchRNN(nn.Module):
        def __init__(self, size_in, norm):
            super().__init__()
            self.norm = nn.BatchNorm1d(size_in) if norm else None
            self.rnn = nn.GRU(size_in, hidden, batch_first=True, bidirectional=True)

        def forward(self, x):
            if self.norm is not None:
                x = self.norm(x.transpose(1, 2)).transpose(1, 2)
            out, _ = self.rnn(x)
            return out[..., :hidden] + out[..., hidden:]

    class DeepSpeech2(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(1, channels, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(channels),
                nn.Hardtanh(0, 20),
                nn.Conv2d(channels, channels, (21, 11), (2, 1), (10, 5)),
                nn.BatchNorm2d(channels), nn.Hardtanh(0, 20))
            self.rnns = nn.ModuleList(BatchRNN(channels * f2 if i == 0 else hidden, i > 0)
                                      for i in range(layers))
            self.fc = nn.Sequential(nn.BatchNorm1d(hidden), nn.Linear(hidden, classes,
                                                                      bias=False))

        def forward(self, spec):
            x = self.conv(spec)                                   # [B, C, F', T']
            b, c, f, t = x.shape
            x = x.reshape(b, c * f, t).transpose(1, 2)            # [B, T', C F']
            for rnn in self.rnns:
                x = rnn(x)
            x = self.fc[1](self.fc[0](x.transpose(1, 2)).transpose(1, 2))
            return x.log_softmax(-1)

    def make_input(batch_size):
        return torch.randn(batch_size, 1, freq, frames, generator=_seeded())
    return DeepSpeech2(), make_input


def gcn(nodes=2708, features=1433, hidden=16, classes=7, edges=10556, layers=2, dropout=0.5):
    """The graph convolutional network of Kipf & Welling (2017) on a graph of Cora's size
    (2708 nodes, 1433 features, 10556 directed edges, 7 classes), random: each layer
    aggregates its neighbours' features with the symmetric normalisation D^-1/2 (A+I) D^-1/2,
    by gather and index_add as PyTorch Geometric's GCNConv does.  A batch of n is n such
    graphs as one disjoint graph; input: (node features [n*nodes, features], edge index
    [2, n*(edges+nodes)]); output: logits [n*nodes, classes]."""
    import torch
    from torch import nn

    class GCNLayer(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.linear = nn.Linear(n_in, n_out, bias=False)
            self.bias = nn.Parameter(torch.zeros(n_out))

        def forward(self, x, edge_index):
            src, dst = edge_index[0], edge_index[1]
            deg = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
            deg.index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
            norm = deg.rsqrt()[src] * deg.rsqrt()[dst]
            h = self.linear(x)
            out = torch.zeros_like(h).index_add_(0, dst, h[src] * norm[:, None])
            return out + self.bias

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            sizes = [features] + [hidden] * (layers - 1) + [classes]
            self.layers = nn.ModuleList(GCNLayer(a, b) for a, b in zip(sizes, sizes[1:]))
            self.drop = nn.Dropout(dropout)

        def forward(self, x, edge_index):
            for i, layer in enumerate(self.layers):
                x = layer(self.drop(x), edge_index)
                if i < len(self.layers) - 1:
                    x = x.relu()
            return x

    def make_input(batch_size):
        g = _seeded()
        x = torch.randn(batch_size * nodes, features, generator=g)
        e = torch.randint(0, nodes, (2, edges), generator=g)
        loops = torch.arange(nodes).repeat(2, 1)                  # A + I
        one = torch.cat([e, loops], dim=1)
        offsets = (torch.arange(batch_size) * nodes).repeat_interleave(one.shape[1])
        return x, one.repeat(1, batch_size) + offsets
    return GCN(), make_input


def dlrm(dense=13, tables=26, rows=100000, dim=16, bottom=(512, 256, 64), top=(512, 256),
         lookups=1):
    """DLRM (Naumov et al. 2019) in the topology of its Criteo Kaggle benchmark: a bottom MLP
    over 13 dense features (13-512-256-64-16), 26 embedding tables (EmbeddingBag, sum) of
    dimension 16, the pairwise dot-product interaction of the 27 vectors, a top MLP
    (367-512-256-1) and a sigmoid.  The tables have `rows` rows each (the benchmark's hold up
    to 10^7: 10^5 keeps the model at 170 MB).  Input: (dense [batch, 13], sparse ids
    [batch, 26, lookups]); output: click probabilities [batch, 1]."""
    import torch
    from torch import nn

    def mlp(sizes, last_sigmoid):
        mods = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            mods.append(nn.Linear(a, b))
            mods.append(nn.Sigmoid() if last_sigmoid and i == len(sizes) - 2 else nn.ReLU())
        return nn.Sequential(*mods)

    n = tables + 1
    inter = dim + n * (n - 1) // 2

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = mlp([dense, *bottom, dim], False)
            self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum")
                                            for _ in range(tables))
            self.top = mlp([inter, *top, 1], True)
            li, lj = torch.tril_indices(n, n, offset=-1)
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)

        def forward(self, dense_x, sparse_ids):
            x = self.bottom(dense_x)
            vecs = [x] + [emb(sparse_ids[:, i]) for i, emb in enumerate(self.embeddings)]
            t = torch.stack(vecs, dim=1)                           # [B, 27, dim]
            z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
            return self.top(torch.cat([x, z], dim=1))

    def make_input(batch_size):
        g = _seeded()
        return (torch.rand(batch_size, dense, generator=g),
                torch.randint(0, rows, (batch_size, tables, lookups), generator=g))
    return DLRM(), make_input


# -- the built-in zoo --------------------------------------------------------------------------
# One row a model: name, family, source, model class (hf), config, input, small.  Parsed as a
# manifest's [[models]] tables are.  Sizes: the config class's defaults where its docstring
# names them a published model, otherwise the published size in config.  small: the overrides
# of Entry.shrunk() (see the module docstring).

_IMG = "AutoModelForImageClassification"
_LM = "AutoModelForCausalLM"
_IN1K = {"num_labels": 1000}
_PY = "python:xsp.zoo.catalog:"


def _s(config=None, **inp):
    """A `small` value: config overrides and input overrides."""
    out = {"config": config or {}}
    if inp:
        out["input"] = inp
    return out


_T = {"vocab_size": 1000}                                          # small text vocabulary
_BERT_S = _s({**_T, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 128}, seq_len=32)
_VIT_S = _s({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128, "image_size": 32, "patch_size": 8})
_LLAMA_S = _s({**_T, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}, seq_len=32)
_W2V_S = _s({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128, "conv_dim": [32] * 7, "num_conv_pos_embeddings": 16,
             "num_conv_pos_embedding_groups": 4}, shape=[4000])
_RESNET_S = _s({"embedding_size": 16, "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]},
               shape=[3, 64, 64])
_SWIN_S = _s({"embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 2, 2, 4],
              "window_size": 2, "image_size": 64})
_STAGES_S = {"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]}

_BUILTIN = [
    # -- CNNs (ImageNet classifiers, 1000 classes) --
    ("resnet-18", "cnn", "hf:ResNetConfig", _IMG,
     {**_IN1K, "depths": [2, 2, 2, 2], "layer_type": "basic",
      "hidden_sizes": [64, 128, 256, 512]}, None, _RESNET_S),
    ("resnet-50", "cnn", "hf:ResNetConfig", _IMG, _IN1K, None, _RESNET_S),
    ("resnet-101", "cnn", "hf:ResNetConfig", _IMG, {**_IN1K, "depths": [3, 4, 23, 3]}, None,
     _RESNET_S),
    ("resnet-152", "cnn", "hf:ResNetConfig", _IMG, {**_IN1K, "depths": [3, 8, 36, 3]}, None,
     _RESNET_S),
    ("convnext-tiny", "cnn", "hf:ConvNextConfig", _IMG, _IN1K, None,
     _s({**_STAGES_S, "image_size": 64})),
    ("convnext-base", "cnn", "hf:ConvNextConfig", _IMG,
     {**_IN1K, "depths": [3, 3, 27, 3], "hidden_sizes": [128, 256, 512, 1024]}, None,
     _s({**_STAGES_S, "image_size": 64})),
    ("convnextv2-tiny", "cnn", "hf:ConvNextV2Config", _IMG, _IN1K, None,
     _s({**_STAGES_S, "image_size": 64})),
    ("regnet-y-040", "cnn", "hf:RegNetConfig", _IMG, _IN1K, None,
     _s({**_STAGES_S, "embedding_size": 16, "groups_width": 8}, shape=[3, 64, 64])),
    ("bit-50", "cnn", "hf:BitConfig", _IMG, _IN1K, None,
     _s({"embedding_size": 16, "hidden_sizes": [32, 64, 128, 256], "depths": [1, 1, 1, 1],
         "num_groups": 4}, shape=[3, 64, 64])),
    ("efficientnet-b0", "cnn", "hf:EfficientNetConfig", _IMG,
     {**_IN1K, "width_coefficient": 1.0, "depth_coefficient": 1.0, "image_size": 224,
      "hidden_dim": 1280, "dropout_rate": 0.2}, None,
     _s({"width_coefficient": 0.25, "depth_coefficient": 0.25, "image_size": 64,
         "hidden_dim": 320})),
    ("efficientnet-b7", "cnn", "hf:EfficientNetConfig", _IMG, _IN1K, None,
     _s({"width_coefficient": 0.25, "depth_coefficient": 0.25, "image_size": 64,
         "hidden_dim": 320})),
    ("poolformer-s12", "cnn", "hf:PoolFormerConfig", _IMG, _IN1K, None,
     _s(_STAGES_S, shape=[3, 64, 64])),
    # -- mobile networks --
    ("mobilenet-v1", "mobile", "hf:MobileNetV1Config", _IMG, _IN1K, None,
     _s({"depth_multiplier": 0.25, "image_size": 64})),
    ("mobilenet-v2", "mobile", "hf:MobileNetV2Config", _IMG, _IN1K, None,
     _s({"depth_multiplier": 0.35, "image_size": 64})),
    ("mobilenet-v2-1.4", "mobile", "hf:MobileNetV2Config", _IMG,
     {**_IN1K, "depth_multiplier": 1.4}, None, _s({"depth_multiplier": 0.35, "image_size": 64})),
    ("mobilevit-small", "mobile", "hf:MobileViTConfig", _IMG, _IN1K, None,
     _s({"image_size": 64, "hidden_sizes": [32, 48, 64],
         "neck_hidden_sizes": [16, 16, 24, 32, 48, 64, 80]})),
    ("mobilevitv2-1.0", "mobile", "hf:MobileViTV2Config", _IMG, _IN1K, None,
     _s({"image_size": 64, "width_multiplier": 0.25})),
    ("levit-128s", "mobile", "hf:LevitConfig", _IMG, _IN1K, None,
     _s({"image_size": 64, "hidden_sizes": [32, 64, 96], "num_attention_heads": [2, 4, 6],
         "depths": [1, 1, 1], "key_dim": [8, 8, 8],
         "down_ops": [["Subsample", 8, 4, 4, 2, 2], ["Subsample", 8, 8, 4, 2, 2]]})),
    ("swiftformer-xs", "mobile", "hf:SwiftFormerConfig", _IMG, _IN1K, None,
     _s({"image_size": 64, "depths": [1, 1, 1, 1], "embed_dims": [16, 24, 32, 48]})),
    # -- vision transformers --
    ("vit-base", "vit", "hf:ViTConfig", _IMG, _IN1K, None, _VIT_S),
    ("vit-large", "vit", "hf:ViTConfig", _IMG,
     {**_IN1K, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
      "intermediate_size": 4096}, None, _VIT_S),
    ("deit-tiny", "vit", "hf:DeiTConfig", _IMG,
     {**_IN1K, "hidden_size": 192, "num_attention_heads": 3, "intermediate_size": 768}, None,
     _VIT_S),
    ("deit-small", "vit", "hf:DeiTConfig", _IMG,
     {**_IN1K, "hidden_size": 384, "num_attention_heads": 6, "intermediate_size": 1536}, None,
     _VIT_S),
    ("deit-base", "vit", "hf:DeiTConfig", _IMG, _IN1K, None, _VIT_S),
    ("beit-base", "vit", "hf:BeitConfig", _IMG, _IN1K, None, _VIT_S),
    ("data2vec-vision-base", "vit", "hf:Data2VecVisionConfig", _IMG, _IN1K, None, _VIT_S),
    ("dinov2-small", "vit", "hf:Dinov2Config", _IMG,
     {**_IN1K, "hidden_size": 384, "num_attention_heads": 6}, None,
     _s({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "image_size": 28, "patch_size": 7})),
    ("dinov2-base", "vit", "hf:Dinov2Config", _IMG, _IN1K, None,
     _s({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "image_size": 28, "patch_size": 7})),
    ("swin-tiny", "vit", "hf:SwinConfig", _IMG, _IN1K, None, _SWIN_S),
    ("swin-base", "vit", "hf:SwinConfig", _IMG,
     {**_IN1K, "embed_dim": 128, "depths": [2, 2, 18, 2], "num_heads": [4, 8, 16, 32]}, None,
     _SWIN_S),
    ("swinv2-tiny", "vit", "hf:Swinv2Config", _IMG, _IN1K, None, _SWIN_S),
    ("focalnet-tiny", "vit", "hf:FocalNetConfig", _IMG, _IN1K, None,
     _s({"embed_dim": 16, "hidden_sizes": [32, 64, 128, 128], "depths": [1, 1, 1, 1],
         "image_size": 64})),
    ("segformer-b0", "vit", "hf:SegformerConfig", _IMG, _IN1K, None,
     _s({"hidden_sizes": [16, 16, 32, 32], "num_attention_heads": [1, 1, 2, 2],
         "depths": [1, 1, 1, 1], "decoder_hidden_size": 32}, shape=[3, 64, 64])),
    ("cvt-13", "vit", "hf:CvtConfig", _IMG, _IN1K, None,
     _s({"embed_dim": [16, 32, 48], "num_heads": [1, 2, 2], "depth": [1, 2, 3]},
        shape=[3, 64, 64])),
    ("pvt-tiny", "vit", "hf:PvtConfig", _IMG, _IN1K, None,
     _s({"hidden_sizes": [16, 16, 32, 32], "num_attention_heads": [1, 1, 2, 2],
         "depths": [1, 1, 1, 1], "image_size": 64})),
    ("pvt-v2-b0", "vit", "hf:PvtV2Config", _IMG, _IN1K, None,
     _s({"hidden_sizes": [16, 16, 32, 32], "num_attention_heads": [1, 1, 2, 2],
         "depths": [1, 1, 1, 1], "image_size": 64})),
    ("hiera-base", "vit", "hf:HieraConfig", _IMG, _IN1K, None,
     _s({"embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 1, 2, 2],
         "image_size": [64, 64]})),
    # -- encoder transformers (the base model: last hidden states) --
    ("bert-base", "encoder", "hf:BertConfig", None, {}, None, _BERT_S),
    ("bert-large", "encoder", "hf:BertConfig", None,
     {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
      "intermediate_size": 4096}, None, _BERT_S),
    ("roberta-base", "encoder", "hf:RobertaConfig", None,
     {"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
      "layer_norm_eps": 1e-5}, None, _BERT_S),
    ("xlm-roberta-base", "encoder", "hf:XLMRobertaConfig", None,
     {"vocab_size": 250002, "max_position_embeddings": 514, "type_vocab_size": 1,
      "layer_norm_eps": 1e-5}, None, _BERT_S),
    ("distilbert-base", "encoder", "hf:DistilBertConfig", None, {}, None,
     _s({**_T, "dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128}, seq_len=32)),
    ("albert-base-v2", "encoder", "hf:AlbertConfig", None,
     {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}, None,
     _s({**_BERT_S["config"], "embedding_size": 32}, seq_len=32)),
    ("electra-small", "encoder", "hf:ElectraConfig", None, {}, None,
     _s({**_BERT_S["config"], "embedding_size": 32}, seq_len=32)),
    ("electra-base", "encoder", "hf:ElectraConfig", None,
     {"embedding_size": 768, "hidden_size": 768, "num_attention_heads": 12,
      "intermediate_size": 3072}, None,
     _s({**_BERT_S["config"], "embedding_size": 64}, seq_len=32)),
    ("deberta-base", "encoder", "hf:DebertaConfig", None, {}, None, _BERT_S),
    ("deberta-v3-base", "encoder", "hf:DebertaV2Config", None,
     {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "intermediate_size": 3072, "vocab_size": 128100, "relative_attention": True,
      "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
      "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1,
      "position_biased_input": False, "layer_norm_eps": 1e-7, "type_vocab_size": 0}, None,
     _s({**_BERT_S["config"], "position_buckets": 16}, seq_len=32)),
    ("mpnet-base", "encoder", "hf:MPNetConfig", None, {}, None, _BERT_S),
    ("convbert-base", "encoder", "hf:ConvBertConfig", None, {}, None,
     _s({**_BERT_S["config"], "embedding_size": 64}, seq_len=32)),
    ("megatron-bert-345m", "encoder", "hf:MegatronBertConfig", None, {}, None, _BERT_S),
    ("modernbert-base", "encoder", "hf:ModernBertConfig", None, {}, None,
     _s({**_BERT_S["config"], "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
         "cls_token_id": 1, "sep_token_id": 2, "global_attn_every_n_layers": 2,
         "local_attention": 16}, seq_len=32)),
    ("squeezebert", "encoder", "hf:SqueezeBertConfig", None, {}, None,
     _s({**_BERT_S["config"], "embedding_size": 64, "q_groups": 2, "k_groups": 2,
         "v_groups": 2, "post_attention_groups": 2, "intermediate_groups": 2,
         "output_groups": 2}, seq_len=32)),
    ("mobilebert", "encoder", "hf:MobileBertConfig", None, {}, None,
     _s({**_T, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64, "embedding_size": 32, "intra_bottleneck_size": 32,
         "true_hidden_size": 32, "num_feedforward_networks": 2}, seq_len=32)),
    ("longformer-base", "encoder", "hf:LongformerConfig", None,
     {"vocab_size": 50265, "max_position_embeddings": 4098, "type_vocab_size": 1,
      "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}, {"seq_len": 1024},
     _s({**_BERT_S["config"], "attention_window": 16}, seq_len=64)),
    ("bigbird-roberta-base", "encoder", "hf:BigBirdConfig", None, {}, {"seq_len": 1024},
     _s({**_BERT_S["config"], "block_size": 8, "num_random_blocks": 2}, seq_len=128)),
    ("fnet-base", "encoder", "hf:FNetConfig", None, {}, None,
     _s({**_T, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128},
        seq_len=32)),
    ("t5-small-encoder", "encoder", "hf:T5Config", "T5EncoderModel", {}, None,
     _s({**_T, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4},
        seq_len=32)),
    ("t5-base-encoder", "encoder", "hf:T5Config", "T5EncoderModel",
     {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12}, None,
     _s({**_T, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4},
        seq_len=32)),
    # -- decoder transformers (causal LMs: logits over the vocabulary) --
    ("gpt2", "decoder", "hf:GPT2Config", _LM, {}, None,
     _s({**_T, "n_embd": 64, "n_layer": 2, "n_head": 2, "bos_token_id": 0,
         "eos_token_id": 0}, seq_len=32)),
    ("gpt2-medium", "decoder", "hf:GPT2Config", _LM,
     {"n_embd": 1024, "n_layer": 24, "n_head": 16}, None,
     _s({**_T, "n_embd": 64, "n_layer": 2, "n_head": 2, "bos_token_id": 0,
         "eos_token_id": 0}, seq_len=32)),
    ("gpt-neo-125m", "decoder", "hf:GPTNeoConfig", _LM,
     {"hidden_size": 768, "num_layers": 12, "num_heads": 12,
      "attention_types": [[["global", "local"], 6]]}, None,
     _s({**_T, "hidden_size": 64, "num_layers": 2, "num_heads": 2, "window_size": 16,
         "attention_types": [[["global", "local"], 1]], "bos_token_id": 0,
         "eos_token_id": 0}, seq_len=32)),
    ("opt-125m", "decoder", "hf:OPTConfig", _LM, {}, None,
     _s({**_T, "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2,
         "num_attention_heads": 2, "word_embed_proj_dim": 64}, seq_len=32)),
    ("pythia-160m", "decoder", "hf:GPTNeoXConfig", _LM,
     {"vocab_size": 50304, "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 2048,
      "tie_word_embeddings": False}, None,
     _s({**_T, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 128}, seq_len=32)),
    ("smollm-135m", "decoder", "hf:LlamaConfig", _LM,
     {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
      "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
      "tie_word_embeddings": True, "max_position_embeddings": 2048}, None, _LLAMA_S),
    ("llama-3.2-1b", "decoder", "hf:LlamaConfig", _LM,
     {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
      "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 64, "tie_word_embeddings": True, "max_position_embeddings": 131072,
      "rms_norm_eps": 1e-5}, None, _LLAMA_S),
    ("qwen2-0.5b", "decoder", "hf:Qwen2Config", _LM,
     {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
      "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
      "tie_word_embeddings": True, "max_position_embeddings": 32768}, None, _LLAMA_S),
    ("qwen3-0.6b", "decoder", "hf:Qwen3Config", _LM,
     {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
      "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 128, "tie_word_embeddings": True, "max_position_embeddings": 40960}, None,
     _LLAMA_S),
    ("mistral-7b", "decoder", "hf:MistralConfig", _LM, {}, None, _LLAMA_S),
    ("gemma-2b", "decoder", "hf:GemmaConfig", _LM,
     {"hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
      "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256}, None,
     _s({**_LLAMA_S["config"], "num_key_value_heads": 1}, seq_len=32)),
    ("phi-1", "decoder", "hf:PhiConfig", _LM, {}, None,
     _s({**_T, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4}, seq_len=32)),
    ("bloom-560m", "decoder", "hf:BloomConfig", _LM,
     {"vocab_size": 250880, "hidden_size": 1024, "n_layer": 24, "n_head": 16}, None,
     _s({**_T, "hidden_size": 64, "n_layer": 2, "n_head": 4}, seq_len=32)),
    ("biogpt", "decoder", "hf:BioGptConfig", _LM, {}, None, _BERT_S),
    ("xglm-564m", "decoder", "hf:XGLMConfig", _LM, {}, None,
     _s({**_T, "d_model": 64, "num_layers": 2, "attention_heads": 2, "ffn_dim": 128},
        seq_len=32)),
    # -- encoder-decoder (decoder inputs: the encoder's shifted right) --
    ("bart-base", "seq2seq", "hf:BartConfig", None,
     {"d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12,
      "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072}, None,
     _s({**_T, "d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
         "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 128,
         "decoder_ffn_dim": 128}, seq_len=32)),
    ("bart-large", "seq2seq", "hf:BartConfig", None, {}, None,
     _s({**_T, "d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
         "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 128,
         "decoder_ffn_dim": 128}, seq_len=32)),
    # -- state-space and recurrent LMs --
    ("mamba-130m", "ssm", "hf:MambaConfig", _LM,
     {"hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280}, None,
     _s({**_T, "hidden_size": 64, "num_hidden_layers": 2}, seq_len=32)),
    ("rwkv-4-169m", "rnn", "hf:RwkvConfig", _LM,
     {"hidden_size": 768, "num_hidden_layers": 12, "attention_hidden_size": 768,
      "intermediate_size": 3072, "context_length": 1024}, None,
     _s({**_T, "hidden_size": 64, "num_hidden_layers": 2, "attention_hidden_size": 64,
         "intermediate_size": 128}, seq_len=32)),
    ("lstm-lm-small", "rnn", _PY + "rnn_lm", None,
     {"cell": "lstm", "embed": 200, "hidden": 200, "seq_len": 20, "dropout": 0.0}, None,
     _s({"vocab": 1000, "embed": 32, "hidden": 32, "seq_len": 16})),
    ("lstm-lm-medium", "rnn", _PY + "rnn_lm", None, {"cell": "lstm"}, None,
     _s({"vocab": 1000, "embed": 64, "hidden": 64, "seq_len": 16})),
    ("lstm-lm-large", "rnn", _PY + "rnn_lm", None,
     {"cell": "lstm", "embed": 1500, "hidden": 1500, "dropout": 0.65}, None,
     _s({"vocab": 1000, "embed": 64, "hidden": 64, "seq_len": 16})),
    ("gru-lm-medium", "rnn", _PY + "rnn_lm", None, {"cell": "gru"}, None,
     _s({"vocab": 1000, "embed": 64, "hidden": 64, "seq_len": 16})),
    ("rnn-tanh-lm-medium", "rnn", _PY + "rnn_lm", None, {"cell": "rnn_tanh"}, None,
     _s({"vocab": 1000, "embed": 64, "hidden": 64, "seq_len": 16})),
    ("bilstm-classifier", "rnn", _PY + "rnn_classifier", None, {}, None,
     _s({"vocab": 1000, "embed": 32, "hidden": 32, "seq_len": 16})),
    ("deepspeech2", "rnn", _PY + "deepspeech2", None, {}, None,
     _s({"freq": 41, "frames": 40, "channels": 8, "hidden": 32, "layers": 2})),
    # -- speech (encoders of raw audio or spectrograms) --
    ("wav2vec2-base", "speech", "hf:Wav2Vec2Config", None, {}, None, _W2V_S),
    ("hubert-base", "speech", "hf:HubertConfig", None, {}, None, _W2V_S),
    ("wavlm-base", "speech", "hf:WavLMConfig", None, {}, None, _W2V_S),
    ("unispeech-sat-base", "speech", "hf:UniSpeechSatConfig", None, {}, None, _W2V_S),
    ("data2vec-audio-base", "speech", "hf:Data2VecAudioConfig", None, {}, None, _W2V_S),
    ("whisper-tiny-encoder", "speech", "hf:WhisperConfig", "WhisperForAudioClassification",
     {}, None,
     _s({"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 2,
         "encoder_ffn_dim": 128, "max_source_positions": 50, "classifier_proj_size": 32})),
    ("whisper-base-encoder", "speech", "hf:WhisperConfig", "WhisperForAudioClassification",
     {"d_model": 512, "encoder_layers": 6, "encoder_attention_heads": 8,
      "encoder_ffn_dim": 2048, "decoder_layers": 6, "decoder_attention_heads": 8,
      "decoder_ffn_dim": 2048}, None,
     _s({"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 2,
         "encoder_ffn_dim": 128, "max_source_positions": 50, "classifier_proj_size": 32})),
    ("ast-audioset", "speech", "hf:ASTConfig", "ASTForAudioClassification",
     {"num_labels": 527}, None,
     _s({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 128, "max_length": 128, "num_mel_bins": 32})),
    # -- graphs and recommendation --
    ("gcn-cora", "gnn", _PY + "gcn", None, {}, None,
     _s({"nodes": 100, "features": 32, "edges": 400})),
    ("dlrm-kaggle", "recommender", _PY + "dlrm", None, {}, None,
     _s({"rows": 1000, "bottom": [32], "top": [32]})),
]

# builtin-small: the shrunk versions of these (see the module docstring).  The forward of each,
# measured on this 2-core CPU (torch 2.13.0, 2 threads, eval mode, no_grad, the median of 20
# calls after 3 warm-up calls, on an otherwise idle machine), at batch 1 / batch 8:
_SMALL_ZOO = [
    "resnet-50",            # 11.6 ms / 27.6 ms
    "mobilenet-v2",         # 17.1 ms / 25.5 ms
    "efficientnet-b0",      #  6.0 ms / 13.9 ms
    "vit-base",             #  1.9 ms /  2.7 ms
    "swin-tiny",            #  5.7 ms /  8.6 ms
    "bert-base",            #  2.0 ms /  2.9 ms
    "gpt2",                 #  2.6 ms /  4.9 ms
    "llama-3.2-1b",         #  2.8 ms /  5.1 ms
    "wav2vec2-base",        #  3.4 ms /  5.9 ms
    "lstm-lm-medium",       #  0.6 ms /  1.7 ms
    "gcn-cora",             #  0.8 ms /  1.6 ms
    "dlrm-kaggle",          #  3.0 ms /  1.7 ms
]

_ROW_KEYS = ("name", "family", "source", "model_class", "config", "input", "small")


@functools.lru_cache(maxsize=None)
def _builtin():
    entries = []
    for row in _BUILTIN:
        t = {k: v for k, v in zip(_ROW_KEYS, row) if v is not None}
        entries.append(_parse_model(t, len(entries), {}, "builtin", os.getcwd()))
    _no_duplicates(entries, "builtin")
    return Zoo(tuple(entries), {}, None)


@functools.lru_cache(maxsize=None)
def _builtin_small():
    full = _builtin()
    return Zoo(tuple(full[name].shrunk() for name in _SMALL_ZOO), {}, None)


def _lookup(name):
    """The built-in entry of this name, or its shrunk version for NAME@small; None for any
    other name."""
    full = {e.name: e for e in _builtin().entries}
    if name in full:
        return full[name]
    if name.endswith("@small") and name[:-len("@small")] in full:
        return full[name[:-len("@small")]].shrunk()
    return None


def __getattr__(name):              # builtin and builtin_small, made when first asked for
    if name == "builtin":
        return _builtin()
    if name == "builtin_small":
        return _builtin_small()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
