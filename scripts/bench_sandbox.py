"""What the sandbox costs: start to verdict for a trivial program, and the
164 HumanEval canonical solutions scored on 2 workers. Prints one JSON
record and a one-line summary.

  python scripts/bench_sandbox.py                  # the current sandbox
  python scripts/bench_sandbox.py --before d698328 # the sandbox of a commit
                                                   # before bubblewrap

`--before` takes that commit's `sandbox.py`, `sandbox_child.py` and
`verifiable/humaneval.py` out of git into a temporary folder and times
them the same way (their API: `run_python(source).passed`, and HumanEval
programs with the tests inside, scored by exit status).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from arithmetic_apps import sandbox
from arithmetic_apps.verifiable import humaneval

from host import cpu_name  # scripts/host.py

TRIVIAL = "pass\n"
FUNCTION = "def f():\n    return 1\n"


def _times(run, repeats):
  """Seconds of each call, after one untimed warm-up."""
  run()
  out = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    out.append(time.perf_counter() - start)
  return out


def _stats(seconds):
  s = sorted(seconds)
  return {"median": round(statistics.median(s), 4), "min": round(s[0], 4),
          "p90": round(s[int(0.9 * (len(s) - 1))], 4), "runs": len(s)}


def _old_modules(commit):
  """The commit's sandbox and humaneval modules, imported from a copy."""
  folder = tempfile.mkdtemp(prefix="bench-sandbox-")
  root = subprocess.run(["git", "rev-parse", "--show-toplevel"],
                        capture_output=True, text=True, check=True,
                        cwd=os.path.dirname(os.path.abspath(__file__))
                        ).stdout.strip()
  modules = {}
  for name, path in (("sandbox_child", "sandbox_child.py"),
                     ("old_sandbox", "sandbox.py"),
                     ("old_humaneval", "verifiable/humaneval.py")):
    text = subprocess.run(
        ["git", "show", f"{commit}:apps/arithmetic_apps/{path}"],
        capture_output=True, text=True, check=True, cwd=root).stdout
    target = os.path.join(folder, f"{name}.py")
    with open(target, "w") as f:
      f.write(text)
    if name != "sandbox_child":
      spec = importlib.util.spec_from_file_location(name, target)
      modules[name] = sys.modules[name] = importlib.util.module_from_spec(
          spec)
      spec.loader.exec_module(modules[name])
  return modules["old_sandbox"], modules["old_humaneval"]


def measure_before(commit, repeats):
  old, old_he = _old_modules(commit)
  limits = old.Limits(wall_seconds=10, cpu_seconds=5)
  trivial = _times(lambda: old.run_python(TRIVIAL, limits, slot=5), repeats)
  problems = humaneval.load_problems()
  programs = [old_he.program(p, p["canonical_solution"]) for p in problems]
  start = time.perf_counter()
  outcomes = old.run_all(programs, limits, workers=2, first_slot=20)
  seconds = time.perf_counter() - start
  return {"code": commit, "isolation": old.isolation(),
          "trivial_run_seconds": _stats(trivial),
          "humaneval_canonical": {
              "seconds": round(seconds, 2), "workers": 2,
              "programs": len(programs),
              "passed": sum(o.passed for o in outcomes)}}


def measure_current(repeats):
  limits = humaneval.LIMITS
  trivial = _times(lambda: sandbox.run_python(TRIVIAL, limits, slot=5),
                   repeats)
  checked = _times(lambda: sandbox.run_checked(
      FUNCTION, "f", lambda f: f(), limits, slot=5), repeats)
  problems = humaneval.load_problems()
  start = time.perf_counter()
  verdicts = humaneval.score_all(
      problems, [p["canonical_solution"] for p in problems], workers=2,
      first_slot=20)
  seconds = time.perf_counter() - start
  return {"code": "current", "isolation": sandbox.isolation(),
          "trivial_run_seconds": _stats(trivial),
          "trivial_checked_seconds": _stats(checked),
          "humaneval_canonical": {
              "seconds": round(seconds, 2), "workers": 2,
              "programs": len(problems),
              "passed": sum(v.passed for v in verdicts),
              "calls": sum(v.calls for v in verdicts)}}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--before", metavar="COMMIT",
                      help="time the sandbox of this commit instead")
  parser.add_argument("--repeats", type=int, default=30)
  parser.add_argument("--out", help="also append the record to this file")
  args = parser.parse_args(argv)
  if args.repeats < 1:
    parser.error("--repeats must be >= 1")
  record = (measure_before(args.before, args.repeats) if args.before else
            measure_current(args.repeats))
  record.update(cpu=cpu_name(), cores=os.cpu_count(),
                load_average=[round(x, 2) for x in os.getloadavg()])
  print(json.dumps(record))
  if args.out:
    with open(args.out, "a") as f:
      f.write(json.dumps(record) + "\n")
  he = record["humaneval_canonical"]
  checked = record.get("trivial_checked_seconds")
  print(f"{record['code']} ({record['isolation']}): trivial program "
        f"{record['trivial_run_seconds']['median']:.3f} s median"
        + (f", checked call {checked['median']:.3f} s" if checked else "")
        + f"; HumanEval canonical {he['passed']}/{he['programs']} passed in "
        f"{he['seconds']:.1f} s on {he['workers']} workers")


if __name__ == "__main__":
  main()
