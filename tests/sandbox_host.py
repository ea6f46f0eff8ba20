"""What the sandbox tests share: whether the sandbox runs here (and
REQUIRE_SANDBOX=1, set by CI, which turns a skip into a failure), slots
per pytest worker, and the host checks made after every hostile program.

The host checks look at the host, not at what the program says: processes
of the slot's uid (the /proc table), the slot's control groups, System V
IPC objects (/proc/sysvipc), TCP listeners of the slot's uid
(/proc/net/tcp, tcp6) and the files of a folder the program was pointed
at.
"""

import os
import time

import pytest

from arithmetic_apps import sandbox, sandbox_cgroups

REQUIRED = os.environ.get("REQUIRE_SANDBOX") == "1"

try:
  ISOLATION, WHY = sandbox.isolation(), ""
except sandbox.SandboxUnavailable as e:
  ISOLATION, WHY = None, str(e)

# A test marked so runs wherever the sandbox runs; elsewhere it is skipped
# with the reason, unless REQUIRE_SANDBOX=1 (CI), where it runs and fails.
needs_sandbox = pytest.mark.skipif(
    ISOLATION is None and not REQUIRED,
    reason=f"the sandbox cannot run here: {WHY}")
# Limits on the whole process tree need root and cgroup controllers.
needs_tree_limits = pytest.mark.skipif(
    (ISOLATION is None or "cgroup" not in ISOLATION) and not REQUIRED,
    reason=f"needs root and cgroup memory/pids controllers (isolation here: "
           f"{ISOLATION or WHY})")

WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)


def slot(module: int, k: int = 0) -> int:
  """A slot no other test module or pytest worker uses at the same time."""
  return 100 * module + 10 * WORKER + k


def require_tree_limits():
  """Inside a test that needs them: fail (not skip) where they are off."""
  assert ISOLATION is not None and "cgroup" in ISOLATION, \
      f"limits on the process tree are off here: {ISOLATION or WHY}"


def _uid_processes(uid):
  found = []
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      if os.stat(f"/proc/{pid}").st_uid == uid:
        found.append(int(pid))
    except FileNotFoundError:
      pass
  return found


def _ipc_objects():
  """Every System V IPC object of the host's IPC namespace, as rows."""
  rows = set()
  for kind in ("shm", "msg", "sem"):
    with open(f"/proc/sysvipc/{kind}") as f:
      rows.update((kind, line.split()[1]) for line in f.readlines()[1:])
  return rows


def _tcp_sockets(uid):
  found = []
  for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(name) as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        if int(fields[7]) == uid:
          found.append(fields[1])
  return found


class Host:
  """A snapshot of the host before a run; `assert_unchanged` after it."""

  def __init__(self, slot_: int, folder: str = None):
    self.slot = slot_
    self.uid = sandbox.FIRST_UID + slot_
    self.folder = folder
    self.files = sorted(os.listdir(folder)) if folder else None
    self.ipc = _ipc_objects()

  def assert_unchanged(self):
    for _ in range(100):  # the kernel reaps a killed namespace asynchronously
      if not _uid_processes(self.uid):
        break
      time.sleep(0.05)
    assert _uid_processes(self.uid) == [], "a process of the sandbox is left"
    new_ipc = _ipc_objects() - self.ipc
    assert not {r for r in new_ipc if r in _objects_of(self.uid)}, new_ipc
    assert _tcp_sockets(self.uid) == []
    layout = sandbox_cgroups.layout()
    if layout is not None:
      for _, base in layout.bases:
        assert not os.path.exists(os.path.join(base, f"slot-{self.slot}"))
    if self.folder is not None:
      assert sorted(os.listdir(self.folder)) == self.files


def _objects_of(uid):
  """IPC objects whose owner is `uid` (column 'uid' of /proc/sysvipc)."""
  rows = set()
  for kind in ("shm", "msg", "sem"):
    with open(f"/proc/sysvipc/{kind}") as f:
      lines = f.readlines()
    header = lines[0].split()
    col = header.index("uid")
    for line in lines[1:]:
      fields = line.split()
      if int(fields[col]) == uid:
        rows.add((kind, fields[1]))
  return rows
