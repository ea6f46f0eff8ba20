#!/usr/bin/env bash
# The throughput benchmark and the paper-power grid on one GPU, in under 10
# minutes, with JAX's CUDA build:
#
#   scripts/gpu_experiments.sh [PYTHON]
#
# PYTHON (default: python) must have jax[cuda12] and this project installed
# (pip install -e '.[models]' -e ./apps). Records go to results/gpu/ (or
# $OUT), labelled with the device (jax.devices()[0].device_kind) and the
# backend; the CPU numbers in the README stay the reference. Samples on a
# GPU are not expected to equal the CPU's bit for bit (other kernels), so
# the grid's records are kept apart from results/experiments_paper/.
set -euo pipefail
PY=${1:-python}
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
"$PY" - <<'PYEOF'
import jax
device = jax.devices()[0]
assert device.platform == "gpu", f"no GPU: {device}"
print("device:", device.device_kind)
PYEOF
# 1. The benchmark (after only: the baseline's CPU-era code is not the point
#    here), with calls of 4,096 rows; about 2 minutes.
timeout 240 "$PY" scripts/bench_experiments.py --baseline none \
  --max-rows 4096 --verses 8 --repeats 8 --out "$OUT/bench_experiments.jsonl"
# 2. The paper grid in calls of 8,192 rows for at most 6 minutes (resumable:
#    run the script again to go on), then its report.
timeout 480 "$PY" scripts/experiments_paper.py --out "$OUT/experiments_paper" \
  --max_rows 8192 --max_minutes 6 | tail -1
