"""The command line's start (issue 28): `xsp summary` of a small file against `import xsp`.

Two small traces are recorded first (three steps of a 3-layer MLP at level ML): one plain, one
with record_shapes=True and profile_memory=True (its summary has the FLOPs line, whose formulas
are torch's).  Then each command runs as a fresh `python` process, rounds times in turn; the
figure is the best (the least disturbed) wall time of each, and its ratio to `python -c
"import xsp"`.  Target (issue 28): `xsp summary` of a small file within 1.5x of `import xsp`.
The heavy packages each command loaded are listed (tests/py/cli/test_cli_imports.py checks
them without timing).

    python benchmarks/bench_cli.py [--rounds 5]
"""
import argparse
import json
import os
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


def record(folder):
    """Writes plain.xsp and shapes.xsp into folder."""
    code = ("import sys, torch, xsp\n"
            "m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), "
            "torch.nn.Linear(32, 4))\nx = torch.randn(8, 16)\n"
            "for name, kw in (('plain', {}), ('shapes', {'record_shapes': True, "
            "'profile_memory': True})):\n"
            "    with xsp.profile(levels='ML', **kw) as prof:\n"
            "        for _ in range(3):\n            m(x)\n            xsp.step()\n"
            "    xsp.save(prof.trace, sys.argv[1] + '/' + name + '.xsp')\n")
    subprocess.run([sys.executable, "-c", code, folder], check=True)


def heavy(args):
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True,
                       text=True)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("HEAVY ")]
    return ", ".join(json.loads(line[-1][6:])) or "-" if line else "?"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        record(d)
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
        best = {name: float("inf") for name, _ in commands}
        for _ in range(a.rounds):
            for name, args in commands:
                cmd = [sys.executable, "-c", "import xsp"] if args is None else \
                    [sys.executable, "-m", "xsp"] + args
                t = time.perf_counter()
                subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True)
                best[name] = min(best[name], time.perf_counter() - t)
        print(common.machine())
        base = best[commands[0][0]]
        print("| command (best of %d) | wall s | / import xsp | heavy packages loaded |"
              % a.rounds)
        print("|---|---|---|---|")
        for name, args in commands:
            print("| `%s` | %.3f | %.2fx | %s |" % (name, best[name], best[name] / base,
                                                  "-" if args is None else heavy(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
