"""Ahead-of-time compilation for TPU v4 (needs libtpu; no TPU).

`make test` installs libtpu (the applications' `tpu` extra, a 700 MB wheel);
skipped where it is missing. Slow: a TPU-compiler run per topology.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                 reason="libtpu is not installed")]


def test_every_topology_compiles_for_tpu_v4_and_shards_memory():
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu",
             TPU_ACCELERATOR_TYPE="v4-8")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
      [sys.executable, str(ROOT / "scripts" / "aot_memory.py"), "--preset",
       "small", "--method", "arithmetic", "--max-decode-len", "16",
       "--source-len", "16"],
      env=env, capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-4000:]
  records = [json.loads(line) for line in proc.stdout.splitlines()
             if line.startswith("{")]
  by_topology = {r["topology"]: r for r in records}
  assert list(by_topology) == ["v4-1x1x1", "v4-1x2x1", "v4-2x2x1", "v4-2x2x2"]
  # Replicated parameters: the same bytes on every chip; the decode's working
  # memory (rows over data) shrinks as chips are added.
  arguments = {r["argument_mib"] for r in records}
  assert len(arguments) == 1
  temps = [by_topology[t]["temp_mib"] for t in by_topology]
  assert temps == sorted(temps, reverse=True) and temps[-1] < temps[0]
  assert all(r["fits_hbm"] for r in records)
