"""The study's sweep: for each method, length and topology, the largest N
that fits per chip, best over the topology's meshes; resumable.

Every compiled point is one JSON line appended to the results file as soon
as it is compiled. The searches are deterministic functions of those
records, so a rerun (after a SIGKILL at any moment) replays the finished
part from the file without compiling and ends with the same table. A point
that fails to compile is a record too (with its error): never retried.

Order: methods, then lengths, then topologies by chip count, then meshes.
Where each search starts is the config's `guess`: "previous" (the best
exponent seen so far for the same method and length: more chips rarely fit
fewer samples) or "formula" (the memory formula's largest N on this mesh,
`memory_model.fits`: two compiles where the formula is right). The guess
changes only which points are compiled, never the answer: every search
ends on a compiled point that fits next to one that does not.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Tuple

from arithmetic_apps import jsonl
from arithmetic_apps.study import memory_model
from arithmetic_apps.study.points import (Point, compile_point, model_of,
                                              record_fits)
from arithmetic_apps.study.search import largest_fitting
from arithmetic_apps.topology import load_topology

TOPOLOGIES = ("v4-1x1x1", "v4-1x2x1", "v4-2x2x1", "v4-2x2x2")
GUESSES = ("previous", "formula")


@dataclasses.dataclass(frozen=True)
class SweepConfig:
  """What the sweep covers (the paper's Figure 5 by default).

  Attributes:
    preset, dtype: the model (mT5-XXL in bfloat16).
    methods: beam search and arithmetic sampling in T5X's layout (the
      paper's), and arithmetic sampling with cross-attention keys/values
      shared per input ("arithmetic_shared", ours; `models.CrossKV`).
      Ancestral sampling is compiled only as a check, at arithmetic's
      largest N on one chip.
    lengths: L, input = output length.
    topologies: from `tpu_configs/`, smallest first.
    max_exp: N up to 2**max_exp (1024).
    guess: where each search starts, "previous" or "formula" (above).
      A results file replays only under the guess that wrote it (another
      guess asks for other points).
  """

  preset: str = "xxl"
  dtype: str = "bfloat16"
  methods: Tuple[str, ...] = ("beam", "arithmetic", "arithmetic_shared")
  lengths: Tuple[int, ...] = (128, 256, 512, 1024)
  topologies: Tuple[str, ...] = TOPOLOGIES
  max_exp: int = 10
  guess: str = "previous"

  def __post_init__(self):
    if self.guess not in GUESSES:
      raise ValueError(f"guess must be one of {GUESSES}, got {self.guess!r}.")

  def searches(self) -> List[Tuple[str, int, str, Tuple[int, int]]]:
    """(method, L, topology, mesh) in sweep order."""
    out = []
    for method in self.methods:
      for length in self.lengths:
        for name in self.topologies:
          for mesh in load_topology(name).mesh_shapes:
            out.append((method, length, name, tuple(mesh)))
    return out


def record_key(record: dict) -> tuple:
  return Point.of(record).key()


class Sweep:
  """Runs (or replays) the searches against a results file.

  Args:
    config: what to cover.
    path: the JSON-lines results file (None: keep records in memory).
    compile_fn: Point -> record (`points.compile_point`; tests pass fakes).
    on_compile: called after each new compile (progress bars).
    read_only: never compile: a point not in the file counts as not
      fitting and is listed in `missing` (a partial table from a sweep
      still running).
  """

  def __init__(self, config: SweepConfig, path: Optional[str],
               compile_fn: Callable[[Point], dict] = compile_point,
               on_compile: Optional[Callable[[dict], None]] = None,
               read_only: bool = False):
    self.config, self.path, self.compile_fn = config, path, compile_fn
    self.on_compile, self.read_only = on_compile, read_only
    self.records: Dict[tuple, dict] = jsonl.load(path, key=record_key)
    self.compiled = 0
    self.missing: List[Point] = []

  def record(self, point: Point) -> dict:
    """The point's record: from the file, or compiled now and appended."""
    key = point.key()
    if key not in self.records and self.read_only:
      self.missing.append(point)
      return {"error": "not compiled yet"}
    if key not in self.records:
      record = self.compile_fn(point)
      jsonl.append(self.path, record)
      self.records[key] = record
      self.compiled += 1
      if self.on_compile is not None:
        self.on_compile(record)
    return self.records[key]

  def point(self, method, length, topology, mesh, n) -> Point:
    return Point(self.config.preset, method, length, topology, mesh, n,
                 self.config.dtype)

  def search(self, method: str, length: int, topology: str,
             mesh: Tuple[int, int], start_exp: Optional[int]) -> Optional[int]:
    """Largest N (a power of two) that fits on this mesh, or None."""
    min_exp = max(0, math.ceil(math.log2(mesh[0])))  # rows split over data
    if min_exp > self.config.max_exp:
      return None
    return largest_fitting(
        lambda n: record_fits(self.record(self.point(method, length,
                                                     topology, mesh, n))),
        min_exp=min_exp, max_exp=self.config.max_exp, start_exp=start_exp)

  def run(self, progress: Optional[Callable[[], None]] = None) -> Dict:
    """All searches; {(method, L, topology): {"n": best N or None, "mesh"}}."""
    best: Dict[tuple, dict] = {}
    hint: Dict[tuple, int] = {}
    for method, length, topology, mesh in self.config.searches():
      start = (self.formula_guess(method, length, topology, mesh)
               if self.config.guess == "formula" else
               hint.get((method, length)))
      n = self.search(method, length, topology, mesh, start)
      slot = best.setdefault((method, length, topology),
                             {"n": None, "mesh": None})
      if n is not None and (slot["n"] is None or n > slot["n"]):
        slot.update(n=n, mesh=list(mesh))
      if n is not None:
        hint[(method, length)] = max(hint.get((method, length), 0),
                                     int(math.log2(n)))
      if progress is not None:
        progress()
    self._ancestral_check(best)
    return best

  def formula_guess(self, method: str, length: int, topology: str,
                    mesh: Tuple[int, int]) -> Optional[int]:
    """The memory formula's largest exponent on this mesh (None: none)."""
    config = model_of(self.point(method, length, topology, mesh, 1)).config
    n = memory_model.largest_n(config, method, length, mesh,
                               load_topology(topology).hbm_bytes_per_chip,
                               self.config.max_exp)
    return None if n is None else int(math.log2(n))

  def _ancestral_check(self, best: Dict) -> None:
    """Ancestral sampling at arithmetic's largest N on the first topology:
    the same program but for the chooser, so it should cost the same."""
    if "arithmetic" not in self.config.methods:
      return
    first = self.config.topologies[0]
    mesh = tuple(load_topology(first).mesh_shapes[0])
    for length in self.config.lengths:
      n = best.get(("arithmetic", length, first), {}).get("n")
      if n is not None:
        self.record(self.point("ancestral", length, first, mesh, n))


def min_chips(best: Dict, method: str, length: int, n: int,
              topologies=TOPOLOGIES) -> Optional[int]:
  """Fewest chips among `topologies` whose largest fitting N is >= n."""
  for name in topologies:
    slot = best.get((method, length, name))
    if slot and slot["n"] is not None and slot["n"] >= n:
      return load_topology(name).chips
  return None


def replica_chips(best: Dict, length: int, n: int,
                  topologies=TOPOLOGIES) -> Optional[int]:
  """Chips for N arithmetic samples in one parallel step split over
  independent replicas of one topology (no communication between them):
  the fewest ceil(N / largest N on t) x chips(t) over the topologies t.

  >>> best = {("arithmetic", 128, "v4-1x1x1"): {"n": 32},
  ...         ("arithmetic", 128, "v4-1x2x1"): {"n": 256}}
  >>> replica_chips(best, 128, 1024, ("v4-1x1x1", "v4-1x2x1"))  # 4 x 2
  8
  """
  counts = []
  for name in topologies:
    slot = best.get(("arithmetic", length, name))
    if slot and slot["n"] is not None:
      counts.append(math.ceil(n / slot["n"]) * load_topology(name).chips)
  return min(counts, default=None)
