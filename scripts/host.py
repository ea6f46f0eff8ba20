"""The machine a benchmark or test-budget record was measured on."""

import pathlib
import platform
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def cpu_name() -> str:
  """The CPU's model name (/proc/cpuinfo), else what `platform` knows.

  >>> isinstance(cpu_name(), str)
  True
  """
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor()


def commit() -> str:
  """The checkout's short commit id (the records' `commit` field)."""
  return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                        capture_output=True, text=True).stdout.strip()
