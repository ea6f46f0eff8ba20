"""Resumable JSON-lines result files for the scripts.

A long job appends one JSON object per finished configuration and, when run
again, skips the configurations already in the file:

  done = jsonl.load(path, key=lambda r: (r["preset"], r["n"]))
  for config in configs:
    if config not in done:
      done[config] = measure(config)
      jsonl.append(path, done[config])

or, with a progress bar, `run_missing(path, configs, key, measure, desc)`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, Hashable, Iterable, Optional


def load(path: Optional[str], key: Callable[[dict], Hashable]
         ) -> Dict[Hashable, Any]:
  """The records already in `path` (none if it is None or missing), by key.

  A last line cut short by a kill mid-write is ignored (its run is redone);
  a bad line anywhere else is an error.
  """
  done = {}
  if path and os.path.exists(path):
    with open(path) as f:
      lines = [line for line in f if line.strip()]
    for i, line in enumerate(lines):
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        if i == len(lines) - 1 and not line.endswith("\n"):
          break
        raise
      done[key(record)] = record
  return done


def append(path: Optional[str], record: dict) -> None:
  """Appends `record` as one line (nothing if path is None), first cutting
  off a torn last line left by a kill mid-write."""
  if not path:
    return
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  if os.path.exists(path):
    with open(path, "rb+") as f:
      data = f.read()
      if data and not data.endswith(b"\n"):
        f.truncate(data.rfind(b"\n") + 1)
  with open(path, "a") as f:
    f.write(json.dumps(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def run_missing(path: Optional[str], items: Iterable[Hashable],
                key: Callable[[dict], Hashable], run: Callable[[Any], dict],
                desc: str, write: bool = True) -> Dict[Hashable, dict]:
  """Runs `run(item)` for each item not yet in `path` (an item is its own
  key; `key` reads it back from a record), appending each record as it
  finishes, with a progress bar. Returns every record by key.

  >>> import tempfile, os
  >>> path = os.path.join(tempfile.mkdtemp(), "runs.jsonl")
  >>> first = run_missing(path, [1, 2], lambda r: r["x"],
  ...                     lambda x: {"x": x, "y": x * x}, "demo")
  >>> again = run_missing(path, [1, 2, 3], lambda r: r["x"],
  ...                     lambda x: {"x": x, "y": -1}, "demo")
  >>> [again[x]["y"] for x in (1, 2, 3)]
  [1, 4, -1]
  """
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  done = load(path, key=key)
  todo = [item for item in items if item not in done]
  for item in tqdm(todo, desc=desc, file=sys.stderr):
    record = run(item)
    if write:
      append(path, record)
    done[item] = record
  return done
