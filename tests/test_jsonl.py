"""The resumable JSON-lines runner (`arithmetic_apps.jsonl`), which every long
job uses (experiments, intervals, the study's sweep and measure mode, the
benchmarks): a run killed at any moment and started again redoes only what
is missing, and ends with the same records as a run never killed."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from arithmetic_apps import jsonl

ITEMS = list(range(12))


def square(x):
  return {"x": x, "y": x * x}


def test_torn_last_line_is_redone_and_cut(tmp_path):
  path = tmp_path / "runs.jsonl"
  path.write_text(json.dumps(square(0)) + "\n" + '{"x": 1, "y"')
  assert list(jsonl.load(str(path), key=lambda r: r["x"])) == [0]
  calls = []
  done = jsonl.run_missing(str(path), [0, 1, 2], lambda r: r["x"],
                           lambda x: calls.append(x) or square(x), "t")
  assert calls == [1, 2]
  assert [json.loads(l) for l in path.read_text().splitlines()] == [
      square(0), square(1), square(2)]
  assert done == {x: square(x) for x in (0, 1, 2)}


def test_a_bad_line_before_the_last_is_an_error(tmp_path):
  path = tmp_path / "runs.jsonl"
  path.write_text('{"x": 0\n' + json.dumps(square(1)) + "\n")
  with pytest.raises(json.JSONDecodeError):
    jsonl.load(str(path), key=lambda r: r["x"])


_WORKER = """
import sys, time
from arithmetic_apps import jsonl
def run(x):
  time.sleep(0.05)
  return {"x": x, "y": x * x}
jsonl.run_missing(sys.argv[1], range(12), lambda r: r["x"], run, "worker")
"""


def test_sigkill_then_rerun_gives_the_clean_run(tmp_path):
  """SIGKILL a real run part way, rerun it: only the missing items run, and
  the file holds exactly the records of a run never killed."""
  path = tmp_path / "runs.jsonl"
  proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(path)],
                          stderr=subprocess.DEVNULL)
  deadline = time.time() + 60
  while time.time() < deadline and (
      not path.exists() or len(path.read_text().splitlines()) < 4):
    time.sleep(0.01)
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  finished = [json.loads(l) for l in path.read_text().splitlines()
              if l.endswith("}")]
  assert 4 <= len(finished) < len(ITEMS)
  calls = []
  done = jsonl.run_missing(str(path), ITEMS, lambda r: r["x"],
                           lambda x: calls.append(x) or square(x), "rerun")
  assert calls == ITEMS[len(finished):]
  assert [json.loads(l) for l in path.read_text().splitlines()] == [
      square(x) for x in ITEMS]
  assert done == {x: square(x) for x in ITEMS}
