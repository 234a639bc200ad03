#!/bin/bash
# On a CUDA machine: ffpa's Python tests (CPU and CUDA) and the training check.
#   python/gpu_check.sh LIBFFPA OUTDIR
# LIBFFPA: path of libffpa.so (the cuda plugin beside it); OUTDIR gets the logs,
# the training CSV/JSON/PNG.
set -u
lib=${1:?path of libffpa.so}
out=${2:?output folder}
mkdir -p "$out"
export FFPA_LIBRARY=$lib PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
python3 - <<'PY'
import sys, torch
sys.path.insert(0, "python")
import ffpa
print("torch", torch.__version__, torch.cuda.get_device_name(), "custom op:", ffpa.USES_CUSTOM_OP)
print(ffpa.backends())
PY
python3 -m pytest -q -rfE --maxfail=30 "$here/tests" 2>&1 | tee "$out/pytest.log"
tests=${PIPESTATUS[0]}
python3 "$here/train_check.py" --out "$out" 2>&1 | tee "$out/train_check.log"
echo "pytest exit $tests"
