"""Command-line programs and their helpers (not the library's API).

  demo    `make demo`
  jsonl   append-only JSON lines for resumable scripts
"""
