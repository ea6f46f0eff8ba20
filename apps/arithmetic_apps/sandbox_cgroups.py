"""Limits that cover a sandboxed program's whole process tree: one control
group per pool slot, made before each run and removed after it.

A process's rlimits are its own: a program that forks four children gets
four times RLIMIT_AS. A control group (cgroup) counts the tree: every
process started in it stays in it, and the kernel charges their memory
(tmpfs pages and System V shared memory included), counts their processes
and meters their CPU together. Per run, in the slot's group:

  memory  the tree's memory, `memory_bytes` (no swap); past it the kernel
          kills a process of the tree (counted: `oom_kills`)
  pids    the tree's processes and threads, `processes`
  cpu     one core's worth of CPU time per wall-clock second (where the
          cpu controller is there)

Two layouts exist. cgroup v2 (one unified tree: `memory.max`, `pids.max`,
`cpu.max`, `cgroup.kill`) is used where its memory and pids controllers
can be enabled for a subtree of the hierarchy's root; cgroup v1 (one tree
per controller: `memory.limit_in_bytes`, `pids.max`, `cpu.cfs_quota_us`)
where memory and pids are mounted as v1 hierarchies, as on this project's
machines (a hybrid layout: v1 controllers, an empty v2 tree). Slot groups
go under this process's own group in each v1 tree (so the machine's
accounting of this process still covers them) and under the root of a v2
tree (the only place v2 lets a group with member processes delegate its
controllers); a slot's group, and the base folder when no other slot is
in it, are removed after every run. Where neither works (not root, no controllers) `layout()`
is None and the sandbox says it falls back to per-process rlimits.

Standard library only; Linux only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import time
from typing import Dict, Optional, Tuple

GROUP = "arithmetic-sandbox"
_V1 = ("memory", "pids", "cpu")  # memory and pids required, cpu optional
_PERIOD_US = 100_000


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where slot groups are made.

  Attributes:
    version: 1 or 2.
    bases: (controller, folder) pairs: the folder under which each slot's
      group is made; v2 has one pair, named "unified".
  """

  version: int
  bases: Tuple[Tuple[str, str], ...]

  @property
  def name(self) -> str:
    return f"cgroup-v{self.version}"


def _mounts(mountinfo: str):
  """(mount point, root inside the hierarchy, fstype, super options)."""
  for line in mountinfo.splitlines():
    left, _, right = line.partition(" - ")
    fields, more = left.split(), right.split()
    if len(fields) >= 5 and len(more) >= 3:
      yield fields[4], fields[3], more[0], set(more[2].split(","))


def _own_paths(proc_cgroup: str) -> Dict[str, str]:
  """controller -> this process's group ("unified" for v2), from
  /proc/self/cgroup ("4:memory:/a/b", "0::/")."""
  own = {}
  for line in proc_cgroup.splitlines():
    _, controllers, path = line.split(":", 2)
    for c in controllers.split(",") if controllers else ["unified"]:
      own[c] = path
  return own


def _join(mount: str, root: str, path: str) -> str:
  """The folder of group `path` in a hierarchy mounted at `mount` whose
  mount shows group `root`."""
  rel = os.path.relpath(path, root) if path.startswith(root) else "."
  return os.path.normpath(os.path.join(mount, rel))


def find_layout(mountinfo: str, proc_cgroup: str) -> Optional[Layout]:
  """The layout these two files describe (v1 preferred where memory and
  pids are v1 hierarchies), before checking that it can be written.

  >>> info = ("35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\\n"
  ...         "39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\\n")
  >>> find_layout(info, "4:memory:/job\\n8:pids:/\\n0::/\\n").bases
  (('memory', '/sys/fs/cgroup/memory/job/arithmetic-sandbox'), ('pids', '/sys/fs/cgroup/pids/arithmetic-sandbox'))
  >>> find_layout("41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\\n", "0::/user.slice\\n")
  Layout(version=2, bases=(('unified', '/sys/fs/cgroup/arithmetic-sandbox'),))
  """
  own = _own_paths(proc_cgroup)
  v1, v2 = {}, None
  for point, root, fstype, options in _mounts(mountinfo):
    if fstype == "cgroup":
      for c in _V1:
        if c in options and c in own:
          v1[c] = os.path.join(_join(point, root, own[c]), GROUP)
    elif fstype == "cgroup2" and v2 is None:
      v2 = os.path.join(point, GROUP)
  if "memory" in v1 and "pids" in v1:
    return Layout(1, tuple((c, v1[c]) for c in _V1 if c in v1))
  if v2 is not None and "memory" not in v1 and "pids" not in v1:
    return Layout(2, (("unified", v2),))
  return None


def _write(path: str, value) -> None:
  with open(path, "w", encoding="ascii") as f:
    f.write(f"{value}\n")


def _read(path: str) -> str:
  with open(path, encoding="ascii") as f:
    return f.read()


def _enable_v2(base: str) -> None:
  """Lets a v2 group's children use memory, pids (and cpu where the
  parent has it): enabled in the parent's and the group's subtree."""
  parent = os.path.dirname(base)
  have = set(_read(os.path.join(parent, "cgroup.controllers")).split())
  wanted = [c for c in ("memory", "pids", "cpu") if c in have]
  if not {"memory", "pids"} <= set(wanted):
    raise OSError("the cgroup v2 tree lacks the memory or pids controller")
  line = " ".join("+" + c for c in wanted)
  _write(os.path.join(parent, "cgroup.subtree_control"), line)
  _write(os.path.join(base, "cgroup.subtree_control"), line)


@functools.lru_cache(maxsize=None)
def layout() -> Optional[Layout]:
  """This machine's usable layout, or None (not root, not Linux, no
  memory and pids controllers, or they cannot be delegated here). Checked
  once per process by making and removing a group."""
  if os.geteuid() != 0:
    return None
  try:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
      info = f.read()
    with open("/proc/self/cgroup", encoding="utf-8") as f:
      own = f.read()
    found = find_layout(info, own)
    if found is None:
      return None
    probe = SlotGroup(found, f"probe-{os.getpid()}")  # processes probe at once
    probe.create(memory_bytes=64 << 20, processes=4)
    probe.destroy()
    return found
  except OSError:
    return None


class SlotGroup:
  """One slot's group in every controller of a layout.

    group = SlotGroup(layout(), "slot-3")
    group.create(memory_bytes=1 << 30, processes=34)
    ... start the program with its first process in group.procs_files ...
    group.oom_kills(); group.destroy()
  """

  def __init__(self, layout_: Layout, name: str):
    self.layout = layout_
    self.dirs = tuple((c, os.path.join(base, name))
                      for c, base in layout_.bases)

  @property
  def procs_files(self) -> Tuple[str, ...]:
    """The files a process writes its pid into to join the group."""
    return tuple(os.path.join(d, "cgroup.procs") for _, d in self.dirs)

  def create(self, memory_bytes: int, processes: int) -> None:
    """A fresh group (a leftover of a crashed run is emptied and removed
    first) with the tree's limits. The base folder is made as needed."""
    self.destroy()
    for _, d in self.dirs:
      base = os.path.dirname(d)
      for attempt in range(100):  # another slot's destroy may remove the base
        try:
          os.mkdir(base)  # (its parent is this process's group, or a root)
        except FileExistsError:
          pass
        try:
          if self.layout.version == 2:
            _enable_v2(base)
          os.mkdir(d)
          break
        except FileNotFoundError:  # the base went between the two mkdirs
          if attempt == 99:
            raise
    for controller, d in self.dirs:
      if self.layout.version == 1:
        if controller == "memory":
          _write(os.path.join(d, "memory.limit_in_bytes"), memory_bytes)
          swap = os.path.join(d, "memory.memsw.limit_in_bytes")
          if os.path.exists(swap):
            _write(swap, memory_bytes)
        elif controller == "pids":
          _write(os.path.join(d, "pids.max"), processes)
        elif controller == "cpu":
          _write(os.path.join(d, "cpu.cfs_period_us"), _PERIOD_US)
          _write(os.path.join(d, "cpu.cfs_quota_us"), _PERIOD_US)
      else:
        _write(os.path.join(d, "memory.max"), memory_bytes)
        if os.path.exists(os.path.join(d, "memory.swap.max")):
          _write(os.path.join(d, "memory.swap.max"), 0)
        _write(os.path.join(d, "pids.max"), processes)
        if os.path.exists(os.path.join(d, "cpu.max")):
          _write(os.path.join(d, "cpu.max"), f"{_PERIOD_US} {_PERIOD_US}")

  def oom_kills(self) -> int:
    """Processes of the group the kernel killed for memory."""
    for controller, d in self.dirs:
      name = {1: "memory.oom_control", 2: "memory.events"}[self.layout.version]
      if controller in ("memory", "unified"):
        for line in _read(os.path.join(d, name)).splitlines():
          key, _, value = line.partition(" ")
          if key == "oom_kill":
            return int(value)
    return 0

  def pids(self) -> set:
    found = set()
    for _, d in self.dirs:
      try:
        found.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
      except FileNotFoundError:
        pass
    return found

  def destroy(self, wait_seconds: float = 10.0) -> None:
    """Kills every process in the group and removes it (no-op when it does
    not exist). Raises OSError if processes remain after `wait_seconds`."""
    if not any(os.path.isdir(d) for _, d in self.dirs):
      return
    deadline = time.monotonic() + wait_seconds
    kill_file = [os.path.join(d, "cgroup.kill") for _, d in self.dirs
                 if os.path.exists(os.path.join(d, "cgroup.kill"))]
    while True:
      left = self.pids()
      if not left:
        break
      if time.monotonic() > deadline:
        raise OSError(f"processes {sorted(left)} outlived their sandbox")
      if kill_file:
        _write(kill_file[0], 1)
      for pid in left:
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      time.sleep(0.002)
    for _, d in self.dirs:
      while os.path.isdir(d):
        try:
          os.rmdir(d)
        except OSError:  # EBUSY while the last exits are accounted
          if time.monotonic() > deadline:
            raise
          time.sleep(0.002)
      try:  # nothing of ours stays in the machine's tree: the base goes too
        os.rmdir(os.path.dirname(d))
      except OSError:  # another slot is in it
        pass
