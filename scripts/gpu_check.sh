#!/usr/bin/env bash
# The device check (a CUDA machine without internet or apt, as lent by the device tool):
# unpacks Debian's msgpack-c carried in .debs/, builds xsp against the installed torch, runs the
# C tests, the CPU test suite, the GPU checks (tests/gpu) and the demo at MLG; logs go to $OUT.
#   echo /.debs/ >> .git/info/exclude; mkdir -p .debs
#   (cd .debs && apt-get download libmsgpack-dev libmsgpackc2)       # once, on a machine with apt
#   run: bash scripts/gpu_check.sh  (carry .debs)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .debs/*.deb >/dev/null 2>&1; then
    for f in .debs/*.deb; do dpkg -x "$f" /tmp/mp; done
    export CPATH=/tmp/mp/usr/include LIBRARY_PATH=/tmp/mp/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=/tmp/mp/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PKG_CONFIG_PATH=/tmp/mp/usr/lib/x86_64-linux-gnu/pkgconfig
    sed -i "s|^prefix=.*|prefix=/tmp/mp/usr|" /tmp/mp/usr/lib/x86_64-linux-gnu/pkgconfig/msgpack*.pc 2>/dev/null
fi
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"; } > "$OUT/machine.txt" 2>&1
XSP_DEV=1 XSP_REQUIRE_TORCH=1 python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.txt" 2>&1 || { tail -50 "$OUT/build.txt"; exit 1; }
make ctest > "$OUT/ctest.txt" 2>&1; echo "ctest rc=$?" | tee -a "$OUT/summary.txt"
python3 -m pytest -q -x tests/py > "$OUT/pytest_cpu.txt" 2>&1; echo "pytest tests/py rc=$?" | tee -a "$OUT/summary.txt"
timeout 300 python3 -m pytest -v -s tests/gpu > "$OUT/pytest_gpu.txt" 2>&1; echo "pytest tests/gpu rc=$?" | tee -a "$OUT/summary.txt"
timeout 120 python3 -m xsp.demo --levels MLG --out "$OUT" > "$OUT/demo.txt" 2>&1; echo "demo rc=$?" | tee -a "$OUT/summary.txt"
tail -30 "$OUT/pytest_gpu.txt"
