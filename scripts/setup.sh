#!/usr/bin/env bash
# Sets up a fresh machine for xsp development: system packages (msgpack-c, yajl, pkg-config, a
# C/C++ compiler), a virtual environment in .venv with the pinned CPU build of torch, and xsp built
# in place (dev flags: warnings are errors).  Idempotent: a second run only rebuilds xsp.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_PIN=${TORCH_PIN:-torch==2.13.0}

have_msgpack() { pkg-config --exists msgpack-c 2>/dev/null || pkg-config --exists msgpack 2>/dev/null; }
# yajl: the streaming JSON parser of the Kineto reader (csrc/io/kjson.c)
have_yajl() { pkg-config --exists yajl 2>/dev/null; }

if ! command -v pkg-config >/dev/null || ! have_msgpack || ! have_yajl || ! command -v g++ >/dev/null; then
    if ! command -v apt-get >/dev/null; then
        echo "setup: need msgpack-c (pkg-config msgpack or msgpack-c), yajl (pkg-config yajl)," \
             "pkg-config and g++" >&2
        exit 1
    fi
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    # Debian 12 / Ubuntu ship msgpack-c 4 as libmsgpack-dev; Debian 13 ships msgpack-c 6 as
    # libmsgpack-c-dev.  Take whichever this release has.
    if apt-cache show libmsgpack-c-dev >/dev/null 2>&1; then MP=libmsgpack-c-dev; else MP=libmsgpack-dev; fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pkg-config g++ "$MP" libyajl-dev \
        >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade "pip>=23" "setuptools>=64" wheel
# torch first (the shim is built against it), pinned: an unpinned torch pulls a CUDA build.
"$VPY" -m pip install -q "$TORCH_PIN" "numpy>=1.22" "pandas>=1.5" "pytest>=8"
# matplotlib: xsp draws its plots as SVG and needs none; the browser check's PNG decoder is
# tested against matplotlib's (the `test` extra)
"$VPY" -m pip install -q "$TORCH_PIN" "matplotlib>=3.5"
# tqdm: the optional progress bar of xsp.measure, which tests/py/producers/test_measure.py checks
"$VPY" -m pip install -q "tqdm==4.70.1"
# transformers: the config classes the built-in model zoo is made of (xsp/zoo/catalog.py; the
# `zoo` extra), with torch pinned in the same command so that pip keeps the CPU build.
# 5.17.0: the release on the machine's local package index, which installs with all its
# dependencies offline (5.25.0 needs kernels>=0.19.1, which no index reachable here has)
"$VPY" -m pip install -q "$TORCH_PIN" "transformers==5.17.0"
# duckdb and pyarrow: the zoo's results database (xsp/zoo/store.py writes Parquet files with
# pyarrow, DuckDB reads them; the `zoo` extra), torch pinned in the same command as above
"$VPY" -m pip install -q "torch==2.13.0" "duckdb==2.0.1" "pyarrow==26.0.1"
XSP_DEV=1 XSP_REQUIRE_TORCH=1 "$VPY" -m pip install -q --no-build-isolation --no-deps -e .
"$VPY" -c "import xsp, xsp._core, torch; import xsp._torch; print('setup: xsp', xsp.__version__, 'with torch', torch.__version__)"

# -- test tools: only with XSP_TEST_TOOLS=1 (`make test` sets it) ----------------------------
# A headless browser for tests/py/report/test_browser.py (scripts/browser_check.py renders the HTML
# report in it).  Idempotent: nothing happens when a chromium is already on PATH.  Pinned to
# the version the check was made with; when the archive no longer has it, the candidate is
# taken, with a warning.  Without apt-get, or when the install fails, it warns and goes on:
# the browser test then skips itself, saying why.
if [ "${XSP_TEST_TOOLS:-0}" = 1 ]; then
    # pytest-xdist for tests/py/perf/test_pytest_plugin.py (the plugin under two workers): the
    # version of xsp's `pytest` extra
    "$VPY" -m pip install -q "pytest-xdist==3.8.0"
    # Ray for tests/py/zoo/test_zoo_run.py (xsp zoo run --engine ray on a real local cluster):
    # xsp's `ray` extra, with torch pinned in the same command so that pip keeps the CPU build
    "$VPY" -m pip install -q "$TORCH_PIN" "ray==2.60.0"
    # HTA and TensorBoard's profiler plugin for tests/py/formats/test_kineto.py, pinned.  HTA 0.5.0
    # declares jupyterlab (and pytest) as requirements, which its analyses never import:
    # installed without its declared dependencies, with the ones it imports, pinned to the
    # versions the tests were made with (numpy and pandas are the project's own).
    "$VPY" -m pip install -q --no-deps "HolisticTraceAnalysis==0.5.0" "torch-tb-profiler==0.4.3"
    "$VPY" -m pip install -q "networkx==3.6.1" "plotly==7.1.0" "pydot==4.0.1" \
        "psutil==7.2.2" "PyYAML==6.0.4"
    # OpenTelemetry for tests/py/formats/test_otlp.py: xsp's `otlp` extra, pinned
    "$VPY" -m pip install -q "opentelemetry-api==1.45.2" "opentelemetry-sdk==1.45.2" \
        "opentelemetry-exporter-otlp-proto-http==1.45.2" "opentelemetry-proto==1.45.2" \
        "protobuf==7.36.2"
    CHROMIUM_PIN=${CHROMIUM_PIN:-156.0.8078.114-1~deb12u1}
    if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
        :
    elif ! command -v apt-get >/dev/null; then
        echo "setup: warning: no apt-get: install chromium yourself for tests/py/report/test_browser.py" >&2
    else
        TSUDO=""; [ "$(id -u)" = 0 ] || TSUDO="sudo"
        $TSUDO apt-get update -qq || true
        # chromium needs chromium-common of its own version: pin both
        if apt-cache madison chromium 2>/dev/null | grep -qF "| $CHROMIUM_PIN |" &&
           apt-cache madison chromium-common 2>/dev/null | grep -qF "| $CHROMIUM_PIN |"; then
            CHROMIUM_PKG="chromium=$CHROMIUM_PIN chromium-common=$CHROMIUM_PIN"
        else
            echo "setup: warning: chromium $CHROMIUM_PIN is not in the archive any more;" \
                 "installing the candidate ($(apt-cache policy chromium 2>/dev/null |
                 sed -n 's/^ *Candidate: //p'))" >&2
            CHROMIUM_PKG=chromium
        fi
        # fonts are only recommended by chromium: without them a page's text is not drawn
        if $TSUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends $CHROMIUM_PKG fonts-liberation fonts-dejavu-core \
                >/dev/null; then
            echo "setup: $(chromium --version 2>/dev/null)"
        else
            echo "setup: warning: could not install $CHROMIUM_PKG; tests/py/report/test_browser.py" \
                 "will skip" >&2
        fi
    fi
fi
