"""A test tier's wall time against its budget, and its slowest tests.

    python scripts/test_budget.py fast        # make test-fast
    python scripts/test_budget.py full        # make test
    python scripts/test_budget.py ci          # .ci/run, on a fresh clone
    python scripts/test_budget.py fast --top 30 --out results/test_budget.jsonl

Runs the tier once: `fast` and `full` their make target from the installed
.venv, with pytest writing a JUnit report (the slowest tests are listed);
`ci` runs `.ci/run` with CI=true on a fresh clone of HEAD, with a copy of
../shared beside it, installs included (as CI does). Prints the wall time
against the budget and, where pytest reported, the sum of the tests' own
times, the slowest tests and the costliest modules (a module's tests run on
one worker in `make test`). Appends one JSON record
to --out if given. The budgets are the project's (docs/testing.md); the
command measures, it asserts nothing: a timing is never a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from host import cpu_name  # scripts/host.py

ROOT = pathlib.Path(__file__).resolve().parent.parent
_SUMMARY = re.compile(r"^=*\s*\d+ (passed|failed).* in [\d.]+s")
TIERS = {"fast": ("test-fast", 240), "full": ("test", 1200),
         "ci": (".ci/run", 1800)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("tier", choices=sorted(TIERS))
  parser.add_argument("--top", type=int, default=20)
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)
  target, budget = TIERS[args.tier]
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
  dirty = subprocess.run(["git", "status", "--porcelain",
                          "--untracked-files=no"], cwd=ROOT,
                         capture_output=True, text=True).stdout
  if dirty.strip():
    commit += "+changes"
  ci_counts = {"passed": 0, "failed": 0, "skipped": 0}
  parts = {}  # ci: each make target's pytest summary
  with tempfile.TemporaryDirectory() as tmp:
    report = pathlib.Path(tmp) / "junit.xml"
    compile_log = pathlib.Path(tmp) / "compiles"
    compile_log.mkdir()
    env = dict(os.environ, ARITHMETIC_TEST_COMPILE_LOG=str(compile_log),
               PYTEST_ADDOPTS=f"--junitxml={report} -o junit_family=xunit1")
    start = time.monotonic()
    if args.tier == "ci":
      # Readable by others, as a CI checkout is: the sandbox's tests run
      # the checkout's code as another user.
      os.chmod(tmp, 0o755)
      clone = pathlib.Path(tmp) / "work" / "main"
      subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)],
                     check=True)
      shared = ROOT.parent / "shared"
      if shared.exists():
        shutil.copytree(shared, clone.parent / "shared")
      env = dict(os.environ, CI="true")
      env.pop("PYTEST_ADDOPTS", None)
      env.pop("VIRTUAL_ENV", None)
      commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                              cwd=clone, capture_output=True,
                              text=True).stdout.strip()
      proc = subprocess.Popen([".ci/run"], cwd=clone, env=env, text=True,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
      part = "make test"
      for line in proc.stdout:  # echoed, and pytest's summaries kept
        print(line, end="", flush=True)
        part = _part(line, part)
        summary = _SUMMARY.search(line)
        if summary:
          parts[part] = _duration(line.strip(" =\n"))
          for kind in ("passed", "failed", "skipped"):
            found = re.search(rf"(\d+) {kind}", line)
            ci_counts[kind] += int(found.group(1)) if found else 0
      done = subprocess.CompletedProcess(proc.args, proc.wait())
    else:
      done = subprocess.run(["make", target], cwd=ROOT, env=env,
                            check=False)
    wall = time.monotonic() - start
    cases = []
    if report.exists():
      for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = ("failed" if case.find("failure") is not None or
                   case.find("error") is not None else
                   "skipped" if case.find("skipped") is not None else
                   "passed")
        cases.append((float(case.get("time") or 0), name, outcome))
    compiles = _compile_totals(compile_log, args.top)
  cases.sort(reverse=True)
  counts = {k: sum(o == k for _, _, o in cases)
            for k in ("passed", "failed", "skipped")}
  if args.tier == "ci":  # from pytest's summary lines: every tier's tests
    counts = ci_counts
  modules = {}  # a module runs on one worker (--dist loadscope)
  for seconds, name, _ in cases:
    module = name.split("::")[0]
    modules[module] = modules.get(module, 0.0) + seconds
  modules = sorted(modules.items(), key=lambda kv: -kv[1])[:args.top]
  command = target if args.tier == "ci" else f"make {target}"
  record = dict(tier=args.tier, target=command, commit=commit,
                wall_seconds=round(wall, 1), budget_seconds=budget,
                within_budget=wall <= budget,
                test_seconds=round(sum(t for t, _, _ in cases), 1),
                exit_code=done.returncode, **counts,
                slowest=[dict(seconds=round(t, 1), test=n)
                         for t, n, _ in cases[:args.top]],
                modules=[dict(seconds=round(t, 1), module=m)
                         for m, t in modules],
                compiles=compiles,
                cpu=cpu_name(), cores=os.cpu_count())
  if parts:
    record["parts"] = parts
  for seconds, name, _ in cases[:args.top]:
    print(f"{seconds:8.1f} s  {name}")
  for module, seconds in modules:
    print(f"{seconds:8.1f} s  {module} (module)")
  if compiles:
    print(f"in the test processes: tracing {compiles['trace'] / 60:.1f} min, "
          f"lowering {compiles['lower'] / 60:.1f} min, compiling "
          f"{compiles['compile'] / 60:.1f} min ({compiles['compile_count']} "
          f"programs, {compiles['cache_hit_count']} of them from the "
          f"persistent cache); compiled programs cleared after "
          f"{compiles['cleared']} tests")
  print(json.dumps(record))
  if args.out:
    with open(args.out, "a") as f:
      f.write(json.dumps(record) + "\n")
  print(f"{command}: {wall / 60:.1f} min wall against a budget of "
        f"{budget / 60:.0f} min ({'within' if wall <= budget else 'OVER'}); "
        f"{counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped; the tests' own times sum to "
        f"{record['test_seconds'] / 60:.1f} min")
  return 0 if done.returncode == 0 else 1


# The make targets .ci/run runs, told apart by the pytest command make
# echoes before each (their recipes in the Makefile); t5x's log is printed
# after a header line.
# (make test's command names tests/integration_llm too, to ignore it.)
_PARTS = (("---- make test-t5x", "make test-t5x"),
          ("pytest -q -rs checks", "make check-results"),
          ("--doctest-modules", "make test"),
          ("tests/integration_llm", "make test-llm"))


def _part(line: str, current: str) -> str:
  """The make target a line of .ci/run's output belongs to.

  >>> _part(".venv/bin/python -m pytest -q -rs checks", "make test")
  'make check-results'
  >>> _part("..F.   [100%]", "make check-results")
  'make check-results'
  >>> _part("python -m pytest --doctest-modules tests "
  ...       "--ignore=tests/integration_llm", "make test")
  'make test'
  """
  for marker, target in _PARTS:
    if marker in line:
      return target
  return current


def _duration(summary: str) -> str:
  """pytest's summary with its seconds as m:ss where it printed both.

  >>> _duration("669 passed, 4 skipped in 1378.12s (0:22:58)")
  '669 passed, 4 skipped in 22:58'
  >>> _duration("32 passed in 353.02s (0:05:53)")
  '32 passed in 5:53'
  >>> _duration("4 passed in 7.58s")
  '4 passed in 7.58s'
  """
  found = re.match(r"(.* in )[\d.]+s \((?:0:0?)?([\d:]+)\)$", summary)
  return found.group(1) + found.group(2) if found else summary


def _compile_totals(folder: pathlib.Path, top: int):
  """The test processes' compile logs (tests/conftest.py) summed: seconds
  tracing, lowering and compiling, programs compiled and taken from the
  persistent cache, tests after which the programs were cleared, and the
  modules that compile longest. None where no test process wrote one (the
  `ci` tier; subprocesses a test starts are not counted)."""
  lines = [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
           for line in path.read_text().splitlines()]
  if not lines:
    return None
  total = {key: round(sum(l.get(key, 0) for l in lines), 1)
           for key in ("trace", "lower", "compile", "cache_hit_seconds")}
  total["compile_count"] = sum(l.get("compile_count", 0) for l in lines)
  total["cache_hit_count"] = sum(l.get("cache_hit_seconds_count", 0)
                                 for l in lines)
  total["cleared"] = sum(bool(l["cleared"]) for l in lines)
  modules = {}  # compile seconds per module, and the tests that compile most
  for l in lines:
    module = l["test"].split("::")[0]
    modules[module] = modules.get(module, 0.0) + l.get("compile", 0)
  total["modules"] = [dict(seconds=round(t, 1), module=m) for m, t in
                      sorted(modules.items(), key=lambda kv: -kv[1])[:top]]
  lines.sort(key=lambda l: -l.get("compile", 0))
  total["tests"] = [dict(seconds=round(l.get("compile", 0), 1),
                         programs=l.get("compile_count", 0), test=l["test"])
                    for l in lines[:top]]
  return total


if __name__ == "__main__":
  sys.exit(main())
