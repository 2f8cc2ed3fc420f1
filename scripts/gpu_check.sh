#!/usr/bin/env bash
# The device check (a CUDA machine without internet or apt, as lent by the device tool):
# unpacks Debian's msgpack-c and yajl carried in .debs/, builds xsp against the installed torch, runs the
# C tests, the CPU test suite, the GPU checks (tests/gpu), the demo at MLG and the GPU
# benchmarks (bench_ops and bench_models with --device cuda).
# Everything it writes goes into ONE archive, $OUT/gpu_check.tar.gz, plus $OUT/summary.txt
# (the device tool brings back only a few files).
#   echo /.debs/ >> .git/info/exclude; mkdir -p .debs
#   (cd .debs && apt-get download libmsgpack-dev libmsgpackc2 libyajl-dev libyajl2)  # once, with apt
#   run: bash scripts/gpu_check.sh  (carry .debs), with a timeout that leaves time to rerun
# BUDGET (seconds, default 420: the device budget is 15 min for everything, its start and a
# retry included) caps the whole script: each step's timeout is cut to what is
# left, a step that cannot get 20 s is skipped (and says so), and the archive is rewritten
# after every step, so a run killed from outside still brings back what it did.
set -uo pipefail
BUDGET=${BUDGET:-420}
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
LOG=/tmp/xsp_gpu_check.$$     # per-run log folder, packed into one archive at exit
rm -rf "$LOG"; mkdir -p "$LOG"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
S="$OUT/summary.txt"
: > "$S"
pack() { tar -czf "$OUT/gpu_check.tar.gz" -C "$LOG" . 2>/dev/null; }
trap pack EXIT
step() {   # step NAME TIMEOUT CMD...: runs CMD with a timeout, logs to NAME.txt, notes rc
    local name=$1 t=$2; shift 2
    local left=$((BUDGET - SECONDS - 10))
    if [ "$left" -lt 20 ]; then
        echo "$name SKIPPED: budget spent ($SECONDS of $BUDGET s)" | tee -a "$S"
        return 125
    fi
    [ "$t" -gt "$left" ] && t=$left
    local t0=$SECONDS
    timeout "$t" "$@" > "$LOG/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc ($((SECONDS - t0)) s, limit $t s)" | tee -a "$S"
    pack
    return $rc
}
if ls .debs/*.deb >/dev/null 2>&1; then
    for f in .debs/*.deb; do dpkg -x "$f" /tmp/mp; done
    MP=/tmp/mp/usr
    export CPATH=$MP/include LIBRARY_PATH=$MP/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$MP/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # no pkg-config needed: the flags are given directly (setup.py, Makefile)
    export XSP_MSGPACK_CFLAGS="-I$MP/include"
    export XSP_MSGPACK_LIBS="-L$MP/lib/x86_64-linux-gnu -lmsgpackc"
    export MSGPACK_FLAGS="$XSP_MSGPACK_CFLAGS $XSP_MSGPACK_LIBS"
    export XSP_YAJL_CFLAGS="-I$MP/include" XSP_YAJL_LIBS="-L$MP/lib/x86_64-linux-gnu -lyajl"
    export YAJL_FLAGS="$XSP_YAJL_CFLAGS $XSP_YAJL_LIBS"
fi
{ uname -a; nvidia-smi; python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "import pandas, numpy; print('pandas', pandas.__version__, 'numpy', numpy.__version__)"
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)"
  ls /usr/local/cuda/include/cupti.h /usr/local/cuda/extras/CUPTI/include/cupti.h; } > "$LOG/machine.txt" 2>&1
# not XSP_DEV: -Werror against this machine's torch and CUDA headers and compiler proves nothing
step build 300 env XSP_REQUIRE_TORCH=1 XSP_BENCH=1 python3 -m pip install --no-build-isolation --no-deps -e . \
    || { tail -40 "$LOG/build.txt" | tee -a "$S"; exit 1; }
step gpu_info 60 python3 -c "import torch, xsp, xsp._core as c; from xsp.producers import profiler as p; \
print(c.gpu_info()); print(p.gpu_unavailable_reason(torch)); assert c.gpu_info()['built']"
cat "$LOG/gpu_info.txt" >> "$S"
step pytest_gpu 400 python3 -m pytest -v -s -p no:cacheprovider tests/gpu
tail -25 "$LOG/pytest_gpu.txt" >> "$S"
step demo 120 python3 -m xsp.demo --levels MLG --out "$LOG/demo"
grep -A12 "Top 8 kernels\|GPU vs CPU\|leveled measurement" "$LOG/demo.txt" >> "$S" 2>/dev/null
# issue 5's GPU part: per-op and model overhead with CUDA activities on, against torch.profiler
step bench_ops_cuda 120 python3 benchmarks/bench_ops.py --device cuda --ops 2000 --rounds 21
grep -v "^USDT" "$LOG/bench_ops_cuda.txt" | tail -10 >> "$S"
step bench_models_cuda 150 python3 benchmarks/bench_models.py --device cuda --iters 3 --rounds 5
grep -v "^USDT" "$LOG/bench_models_cuda.txt" | tail -16 >> "$S"
# the CPU suite against this machine's torch, then the C tests (both also run in CI)
step pytest_cpu 300 python3 -m pytest -q -x -p no:cacheprovider tests/py
tail -3 "$LOG/pytest_cpu.txt" >> "$S"
step ctest 240 make ctest
