"""The command line's start (issue 28): `xsp summary` of a small file against `import xsp`.

Two small traces are recorded first (three steps of a 3-layer MLP at level ML): one plain, one
with record_shapes=True and profile_memory=True (its summary has the FLOPs line, whose formulas
are torch's, and the memory lines).  Then each command runs as a fresh `python` process, rounds
times in turn; the figure is the best (the least disturbed) wall time of each, and its ratio to
`python -c "import xsp"`; and the best of its CPU time (user + system, the child's rusage),
which other work on the machine disturbs less than the wall time.  Target (issue 28): `xsp
summary` of a small file within 1.5x of `import xsp`.  The heavy packages each command loaded
are listed (tests/py/cli/test_cli_imports.py checks them without timing).

Each command is timed two ways, in the same rounds:
  - bytecode cached: as an installed xsp starts (pip compiles its modules at install): the
    children write and read .pyc files in a cache of their own (PYTHONPYCACHEPREFIX, filled by a
    first, untimed run of each command), PYTHONDONTWRITEBYTECODE unset;
  - from source: xsp's own modules compiled at every start, as an editable checkout without
    __pycache__ runs them under PYTHONDONTWRITEBYTECODE=1 (our development machines); the
    installed packages (numpy, torch, pandas) keep their .pyc.  This column grows with the
    size of the modules a command imports; it is meaningful only where xsp's folders hold no
    __pycache__ (said when they do).

--base DIR times another xsp (an older revision: DIR/xsp, built) in the same rounds, for a
before and after under the same load; --breakdown cuts each command's start into phases.

    python benchmarks/bench_cli.py [--rounds 5] [--breakdown] [--base DIR]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import common

HEAVY = ("pandas", "matplotlib", "torch")
PROBE = ("import json, runpy, sys\nsys.argv = ['xsp'] + json.loads(sys.argv[1])\n"
         "try:\n    runpy.run_module('xsp', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "sys.stderr.write('\\nHEAVY ' + json.dumps(sorted(m for m in %r if m in sys.modules)))"
         % (HEAVY,))


def record(folder, env):
    """Writes plain.xsp and shapes.xsp into folder."""
    code = ("import sys, torch, xsp\n"
            "m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), "
            "torch.nn.Linear(32, 4))\nx = torch.randn(8, 16)\n"
            "for name, kw in (('plain', {}), ('shapes', {'record_shapes': True, "
            "'profile_memory': True})):\n"
            "    with xsp.profile(levels='ML', **kw) as prof:\n"
            "        for _ in range(3):\n            m(x)\n            xsp.step()\n"
            "    xsp.save(prof.trace, sys.argv[1] + '/' + name + '.xsp')\n")
    subprocess.run([sys.executable, "-c", code, folder], check=True, env=env, cwd=folder)


def heavy(args, env, cwd):
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True,
                       text=True, env=env, cwd=cwd)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("HEAVY ")]
    return ", ".join(json.loads(line[-1][6:])) or "-" if line else "?"


# --breakdown: each command's start cut into phases, each timed with perf_counter in one fresh
# process (a statement per phase, run in order; the process runs what `xsp CMD` runs, the imports
# made explicit first); the best of the rounds per phase.  -X importtime cannot say this: the
# modules xsp imports on first use (importlib.import_module in xsp.report's and xsp.analysis'
# __getattr__) are left out of its tree, their time in their importer's self time.
IMPORTS = [("argparse (+gettext, locale)", "import argparse"),
           ("xsp.cli, xsp.report", "import xsp.cli"),
           ("xsp.report.summary (+tables, memory, compiled, iterations)",
            "import xsp.report.summary"),
           ("the parser (+shutil): every command's arguments",
            "from xsp import cli; cli._parser().parse_args(ARGS)"),
           ("load", "tr = cli._load(PATH)")]
PHASES = {
    "summary plain.xsp": IMPORTS + [("report.text", "xsp.report.text(tr)")],
    "summary shapes.xsp": IMPORTS + [
        ("import torch", "import torch"),
        ("flops.summary, first call (torch's meta kernels; addmm's imports torch._dynamo)",
         "from xsp.analysis import flops; flops.summary(tr)"),
        ("report.text (its FLOPs again, warm)", "xsp.report.text(tr)")],
    "export plain.xsp -o t.json": IMPORTS[:2] + [IMPORTS[3], IMPORTS[4], (
        "save (Chrome JSON)", "xsp.save(tr, OUT, format='chrome')")],
    "report plain.xsp -o r.html": IMPORTS + [
        ("xsp.report.page (+parts, peaks, distributed)", "import xsp.report.page"),
        ("import pandas", "import pandas"),
        ("report.html", "xsp.report.html(tr, path=OUT)")],
}
CHILD = """import json, sys, time
names, steps, ARGS, PATH, OUT = json.loads(sys.argv[1])
out, t0 = [], time.perf_counter()
import xsp
out.append(time.perf_counter() - t0)
for st in steps:
    t0 = time.perf_counter()
    exec(st)
    out.append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def breakdown(folder, env, rounds):
    """{command: [(phase, best seconds)]} of PHASES."""
    out = {}
    for cmd, phases in PHASES.items():
        words = cmd.split()
        args = [words[0], os.path.join(folder, words[1])] + (
            ["-o", os.path.join(folder, words[3])] if len(words) > 3 else [])
        spec = json.dumps([[n for n, _ in phases], [st for _, st in phases], args,
                           args[1], args[-1]])
        best = None
        for _ in range(rounds):
            p = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True,
                               text=True, env=env, check=True, cwd=folder)
            got = json.loads(p.stdout.strip().splitlines()[-1])
            best = got if best is None else [min(x, y) for x, y in zip(best, got)]
        out[cmd] = list(zip(["import xsp"] + [n for n, _ in phases], best))
    return out


def stale_caches():
    """The __pycache__ folders beside xsp's sources (the from-source column reads them)."""
    pkg = os.path.join(common.ROOT, "xsp")
    return [d for d, _, _ in os.walk(pkg) if os.path.basename(d) == "__pycache__"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--breakdown", action="store_true",
                    help="also cut each command's start into phases (PHASES), both ways")
    ap.add_argument("--base", metavar="DIR",
                    help="also time another xsp in the same rounds: DIR holds its xsp/ package, "
                    "built (e.g. git archive REV xsp | tar -x -C DIR, and the .so files)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        # the children run in d (no xsp/ there: `python -c` and `-m` put the working
        # directory first on sys.path) with PYTHONPATH naming the tree timed
        trees = {"this tree": common.ROOT}
        if a.base:
            trees["base: " + a.base] = os.path.abspath(a.base)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")}
        envs = {(t, m): dict(env, PYTHONPATH=root, **(
            {"PYTHONPYCACHEPREFIX": os.path.join(d, "pyc")} if m == "cached" else
            {"PYTHONDONTWRITEBYTECODE": "1"})) for t, root in trees.items()
            for m in ("cached", "source")}
        record(d, envs["this tree", "cached"])
        plain, shapes = os.path.join(d, "plain.xsp"), os.path.join(d, "shapes.xsp")
        commands = [
            ('python -c "import xsp"', None),
            ("xsp summary plain.xsp", ["summary", plain]),
            ("xsp summary shapes.xsp", ["summary", shapes]),
            ("xsp export plain.xsp -o t.json", ["export", plain, "-o",
                                                os.path.join(d, "t.json")]),
            ("xsp report plain.xsp -o r.html", ["report", plain, "-o",
                                                os.path.join(d, "r.html")]),
        ]

        def run(args, key):
            """(wall s, CPU s: the child's user + system time) of one run."""
            cmd = [sys.executable, "-c", "import xsp"] if args is None else \
                [sys.executable, "-m", "xsp"] + args
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True, env=envs[key], cwd=d)
            wall = time.perf_counter() - t
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

        for t in trees:                     # fills the bytecode cache
            for _, args in commands:
                run(args, (t, "cached"))
        best = {(name, key): (float("inf"),) * 2 for name, _ in commands for key in envs}
        for _ in range(a.rounds):
            for name, args in commands:
                for key in envs:
                    best[name, key] = tuple(map(min, best[name, key], run(args, key)))
        print(common.machine())
        stale = stale_caches()
        if stale:
            print("note: %d __pycache__ folders in xsp/ (e.g. %s): the from-source column read "
                  "their .pyc" % (len(stale), stale[0]))
        for t in trees:
            loads = {name: "-" if args is None else heavy(args, envs[t, "cached"], d)
                     for name, args in commands}
            for m, words in (("cached", "bytecode cached"), ("source", "from source")):
                base = best[commands[0][0], (t, m)]
                print("\n%s, %s\n\n| command (best of %d) | wall s | / import xsp | CPU s | "
                      "/ import xsp | heavy packages loaded |\n|---|---|---|---|---|---|"
                      % (t, words, a.rounds))
                for name, _ in commands:
                    w, c = best[name, (t, m)]
                    print("| `%s` | %.3f | %.2fx | %.3f | %.2fx | %s |" % (
                        name, w, w / base[0], c, c / base[1], loads[name]))
        if a.breakdown:
            got = {m: breakdown(d, envs["this tree", m], a.rounds) for m in ("cached", "source")}
            for cmd in PHASES:
                print("\n`xsp %s`, best of %d | ms, bytecode cached | ms, from source |\n"
                      "|---|---|---|" % (cmd, a.rounds))
                for (name, c), (_, s) in zip(got["cached"][cmd], got["source"][cmd]):
                    print("| %s | %.1f | %.1f |" % (name, c * 1e3, s * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
