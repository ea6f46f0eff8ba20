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


def commit(mark_changes: bool = False) -> str:
  """The checkout's short commit id (the records' `commit` field); with
  `mark_changes`, '+changes' appended where tracked files differ from it."""
  run = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True,
                                  text=True).stdout.strip()
  dirty = mark_changes and run("status", "--porcelain",
                               "--untracked-files=no")
  return run("rev-parse", "--short", "HEAD") + ("+changes" if dirty else "")
