"""Resumable JSON-lines result files for the scripts.

A long job appends one JSON object per finished configuration and, when run
again, skips the configurations already in the file:

  done = jsonl.load(path, key=lambda r: (r["preset"], r["n"]))
  for config in configs:
    if config not in done:
      done[config] = measure(config)
      jsonl.append(path, done[config])
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Hashable, Optional


def load(path: Optional[str], key: Callable[[dict], Hashable]
         ) -> Dict[Hashable, Any]:
  """The records already in `path` (none if it is None or missing), by key."""
  done = {}
  if path and os.path.exists(path):
    with open(path) as f:
      for line in f:
        if line.strip():
          record = json.loads(line)
          done[key(record)] = record
  return done


def append(path: Optional[str], record: dict) -> None:
  """Appends `record` as one line (nothing if path is None)."""
  if not path:
    return
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "a") as f:
    f.write(json.dumps(record) + "\n")
