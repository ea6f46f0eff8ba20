"""The machine a benchmark or test-budget record was measured on."""

import platform


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
