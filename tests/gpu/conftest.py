"""The GPU checks: run on a CUDA machine (scripts/gpu_check.sh); skipped elsewhere."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (os.path.join(ROOT, "tests", "py"), ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)
