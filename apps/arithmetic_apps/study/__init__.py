"""The Figure 5 study: how many TPU chips N samples at length L need.

Reading order: `points` (one compiled point: a sharded decode AOT-compiled
for a TPU topology, its per-chip bytes) -> `memory_model` (the same bytes
from a formula, for hardware we cannot compile for) -> `search` (the
largest N that fits, by doubling and bisection) -> `sweep` (every method,
length and topology, resumable) -> `report` (table and figure).
`python -m arithmetic_apps.study --help` is the CLI.
"""
