"""Keeping a long process's compiled programs within the kernel's limits.

XLA:CPU keeps every program a process compiles mapped in memory, many
mappings per program. A process that decodes at many shapes (the
translator's compacted decoding compiles one program per (sample rows,
model rows, cache size) it meets) would in time reach the kernel's limit
on a process's mappings (`vm.max_map_count`, 65,530 on Linux by default),
and the compiler then crashes. Clearing all of them after every unit of
work wastes the compiles of programs the next unit runs again. So clear
them only once the process holds many mappings:

    for run in runs:
      do(run)
      release_if_many()  # cleared when over MAX_MAPPINGS, else kept
"""

from __future__ import annotations

import jax

# Well below the default vm.max_map_count (65,530): no single run or test
# of this project adds more than a few thousand mappings.
MAX_MAPPINGS = 20_000


def mappings() -> int:
  """This process's memory mappings, or -1 where they cannot be read
  (no /proc)."""
  try:
    with open("/proc/self/maps", "rb") as maps:
      return sum(1 for _ in maps)
  except OSError:
    return -1


def release_if_many(max_mappings: int = MAX_MAPPINGS) -> bool:
  """Clears JAX's compiled programs if this process holds more than
  `max_mappings` mappings, or if that cannot be measured. Returns whether
  it cleared them."""
  count = mappings()
  if count < 0 or count > max_mappings:
    jax.clear_caches()
    return True
  return False
