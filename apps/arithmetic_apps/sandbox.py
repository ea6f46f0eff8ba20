"""A sandbox for model-written code: each program in its own process, with
limits, alone, and gone afterwards.

  outcome = run_python("print(1 + 1)")
  outcome.passed, outcome.status, outcome.output      # True 'passed' '2\\n'
  outcomes = run_all(programs, Limits(wall_seconds=10), workers=2)

What a program gets (`isolation() == "namespaces"`, the mode used when this
process is root and `unshare` works, as on this project's machines and CI):

  process      its own PID namespace; the program is process 1, so when it
               ends (or is killed) the kernel kills everything it started;
               its own session, killed as a whole at the wall-clock limit
  user         an unprivileged uid/gid of its pool slot (61000 + slot), no
               supplementary groups, no new privileges: it cannot signal
               the host's processes or another slot's
  files        every mount read-only; a fresh tmpfs (`tmpfs_bytes`) on /tmp,
               /var/tmp and /dev/shm, its working directory /tmp/work; all
               of it disappears with the mount namespace
  network      a new network namespace: only loopback, down; nothing is
               reachable, not even the host's 127.0.0.1
  limits       RLIMIT_CPU, RLIMIT_AS (address space), RLIMIT_NPROC (per slot
               uid: no fork bomb), RLIMIT_FSIZE, 64 open files, no core
  environment  PATH, HOME, LANG only; `python -I -S -B` (no site-packages,
               no user site, no PYTHON* variables, no bytecode written)
  output       stdout and stderr together, at most `output_bytes` read: a
               program that prints more is killed ("output")

Without root or namespaces (`isolation() == "rlimits"`) the program runs as
the caller's user in a temporary directory with the same resource limits
and a Python audit hook (which cannot be removed) that refuses sockets,
subprocesses, `ctypes`, signals, and opening for writing, deleting,
renaming or changing files outside its directory. Weaker: it can still read
what the user can, and an audit hook is a Python-level guard, not a kernel
one. Every `Outcome` says which mode ran.

Statuses: passed (exit 0), failed (non-zero exit: an assertion, an
exception, `sys.exit(1)`), timeout (wall clock), cpu (CPU time), memory
(MemoryError under the address-space limit), output (printed too much),
killed (a signal, e.g. SIGKILL from the kernel), error (the sandbox itself
could not start the program).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, List, Optional, Sequence

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "sandbox_child.py")
FIRST_UID = 61000

# Prepended in the "rlimits" mode: Python's audit hooks cannot be removed.
_AUDIT_PREAMBLE = '''
import os as _os, sys as _sys
_ROOT = _os.path.dirname(_os.path.abspath(_sys.argv[0])) + _os.sep
_WRITE = (_os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_TRUNC |
          _os.O_APPEND)
_BLOCKED = ("socket.", "subprocess.", "os.exec", "os.fork", "os.posix_spawn",
            "os.spawn", "os.system", "ctypes.", "os.kill", "os.killpg",
            "signal.pthread_kill", "os.setuid", "os.setgid",
            "resource.setrlimit", "resource.prlimit")
_PATHS = ("os.remove", "os.rmdir", "os.rename", "os.link", "os.symlink",
          "os.truncate", "os.mkdir", "os.chmod", "os.chown", "os.utime",
          "shutil.rmtree", "shutil.copyfile", "shutil.move")
def _inside(path):
    try:
        return _os.path.abspath(_os.fsdecode(path)).startswith(_ROOT)
    except Exception:
        return False
def _sandbox_hook(event, args):
    if event.startswith(_BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")
                  or isinstance(flags, int) and flags & _WRITE)
        if writes and not isinstance(path, int) and not _inside(path):
            raise PermissionError(f"sandbox: writing {path!r} is not allowed")
    elif event in _PATHS and args and not isinstance(args[0], int) and \
            not _inside(args[0]):
        raise PermissionError(f"sandbox: {event} outside its directory")
_sys.addaudithook(_sandbox_hook)
del _os, _sys
'''


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one program may use.

  Attributes:
    wall_seconds: wall-clock limit (the process group is killed).
    cpu_seconds: CPU-time limit (RLIMIT_CPU).
    memory_bytes: address-space limit (RLIMIT_AS).
    processes: processes of the slot's uid (RLIMIT_NPROC).
    file_bytes: largest file it may write (RLIMIT_FSIZE).
    tmpfs_bytes: size of its /tmp (its working directory).
    output_bytes: stdout + stderr read before it is killed.
    max_source_bytes: longest program accepted.
  """

  wall_seconds: float = 10.0
  cpu_seconds: int = 5
  memory_bytes: int = 1 << 30
  processes: int = 32
  file_bytes: int = 1 << 20
  tmpfs_bytes: int = 16 << 20
  output_bytes: int = 64 << 10
  max_source_bytes: int = 1 << 20

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if not isinstance(value, (int, float)) or isinstance(value, bool) or \
          value <= 0:
        raise ValueError(f"{field.name} must be a positive number; got "
                         f"{value!r}.")


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How one program ended.

  Attributes:
    passed: it exited with status 0 within every limit.
    status: passed, failed, timeout, cpu, memory, output, killed or error.
    reason: one line: the last line of its error output, or the limit hit.
    output: the first `output_bytes` of stdout + stderr (decoded, replaced).
    seconds: wall-clock time.
    isolation: "namespaces" or "rlimits" (see the module docstring).
  """

  passed: bool
  status: str
  reason: str
  output: str
  seconds: float
  isolation: str


@functools.lru_cache(maxsize=None)
def isolation() -> str:
  """"namespaces" when this process is root and `unshare` can make network,
  mount and PID namespaces here; else "rlimits"."""
  if os.geteuid() != 0 or shutil.which("unshare") is None:
    return "rlimits"
  try:
    done = subprocess.run(
        ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
         "true"], capture_output=True, timeout=20, check=False)
  except (OSError, subprocess.SubprocessError):
    return "rlimits"
  return "namespaces" if done.returncode == 0 else "rlimits"


def _command(limits: Limits, slot: int, mode: str, workdir: Optional[str]):
  if mode == "namespaces":
    config = dict(uid=FIRST_UID + slot, gid=FIRST_UID + slot,
                  python_prefix=sys.base_prefix,
                  memory_bytes=int(limits.memory_bytes),
                  cpu_seconds=int(limits.cpu_seconds),
                  processes=int(limits.processes),
                  file_bytes=int(limits.file_bytes),
                  tmpfs_bytes=int(limits.tmpfs_bytes),
                  max_source_bytes=int(limits.max_source_bytes))
    return ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child",
            "--mount-proc", sys.executable, "-I", "-S", _CHILD,
            json.dumps(config)], None
  env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8",
         "PYTHONHASHSEED": "0"}
  return ([sys.executable, "-I", "-S", "-B", os.path.join(workdir, "prog.py")],
          env)


def _limits_preamble(limits: Limits) -> str:
  """The "rlimits" mode's first lines: the program lowers its own limits
  (no preexec_fn: forking a threaded parent to run Python is unsafe), then
  the audit hook forbids raising them again."""
  cpu = int(limits.cpu_seconds)
  return (
      "import resource as _r\n"
      f"_r.setrlimit(_r.RLIMIT_AS, ({int(limits.memory_bytes)},) * 2)\n"
      f"_r.setrlimit(_r.RLIMIT_FSIZE, ({int(limits.file_bytes)},) * 2)\n"
      "_r.setrlimit(_r.RLIMIT_NOFILE, (64, 64))\n"
      "_r.setrlimit(_r.RLIMIT_CORE, (0, 0))\n"
      f"_r.setrlimit(_r.RLIMIT_CPU, ({cpu}, {cpu + 1}))\n"
      "del _r\n")


def _status(returncode: int, output: str, timed_out: bool,
            too_much: bool) -> tuple:
  lines = [l for l in output.strip().splitlines() if l.strip()]
  last = lines[-1][:300] if lines else ""
  if too_much:
    return "output", "printed more than the output limit"
  if timed_out:
    return "timeout", "wall-clock limit"
  if returncode == 0:
    return "passed", ""
  sig = -returncode if returncode < 0 else (
      returncode - 128 if returncode > 128 else 0)
  if sig == signal.SIGXCPU:
    return "cpu", "CPU-time limit"
  if "MemoryError" in output:
    return "memory", last or "MemoryError"
  if sig == signal.SIGXFSZ:
    return "failed", "file-size limit"
  if sig:
    return "killed", f"killed by signal {signal.Signals(sig).name}"
  if returncode in (3, 4) and output.startswith("sandbox:"):
    return "error", last
  return "failed", last or f"exit status {returncode}"


def run_python(source: str, limits: Limits = Limits(), slot: int = 0,
               mode: Optional[str] = None) -> Outcome:
  """Runs Python `source` in the sandbox; never raises for what the program
  does (a `ValueError` / `TypeError` for bad arguments).

  Args:
    source: the program (a str).
    limits: a `Limits`.
    slot: the pool slot (its uid; two programs running at once must have
      different slots).
    mode: "namespaces" or "rlimits" (default: `isolation()`).
  """
  if not isinstance(source, str):
    raise TypeError(f"source must be a str; got {type(source).__name__}.")
  if not isinstance(slot, int) or not 0 <= slot < 1000:
    raise ValueError(f"slot must be an int in [0, 1000); got {slot!r}.")
  mode = isolation() if mode is None else mode
  if mode not in ("namespaces", "rlimits"):
    raise ValueError(f"mode must be 'namespaces' or 'rlimits'; got {mode!r}.")
  data = source.encode("utf-8", "replace")
  workdir = None
  if mode == "rlimits":
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    with open(os.path.join(workdir, "prog.py"), "wb") as f:
      f.write((_limits_preamble(limits) + _AUDIT_PREAMBLE).encode() + data)
  command, env = _command(limits, slot, mode, workdir)
  start = time.monotonic()
  kept = bytearray()
  too_much = threading.Event()
  try:
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir or "/",
        env=env if env is not None else {"PATH":
                                                             os.defpath})
  except OSError as e:
    return Outcome(False, "error", f"could not start: {e}", "", 0.0, mode)

  def feed():
    try:
      proc.stdin.write(data if mode == "namespaces" else b"")
      proc.stdin.close()
    except OSError:
      pass

  def drain():
    while True:
      chunk = proc.stdout.read1(1 << 16)
      if not chunk:
        return
      room = limits.output_bytes - len(kept)
      kept.extend(chunk[:max(room, 0)])
      if len(chunk) > room:
        too_much.set()
        _kill(proc)
        return

  threads = [threading.Thread(target=feed, daemon=True),
             threading.Thread(target=drain, daemon=True)]
  for t in threads:
    t.start()
  timed_out = False
  try:
    proc.wait(timeout=limits.wall_seconds)
  except subprocess.TimeoutExpired:
    timed_out = True
  _kill(proc)
  proc.wait()
  threads[1].join(timeout=5)
  proc.stdout.close()
  if workdir is not None:
    shutil.rmtree(workdir, ignore_errors=True)
  output = bytes(kept).decode("utf-8", "replace")
  status, reason = _status(proc.returncode, output, timed_out,
                           too_much.is_set())
  return Outcome(status == "passed", status, reason, output,
                 time.monotonic() - start, mode)


def _kill(proc: subprocess.Popen) -> None:
  """SIGKILL to the program's whole process group (the PID namespace's
  processes die with its process 1)."""
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass


def run_all(sources: Sequence[str], limits: Limits = Limits(),
            workers: int = 2,
            progress: Optional[Callable[[int, Outcome], None]] = None,
            first_slot: int = 0) -> List[Outcome]:
  """Runs every program, `workers` at a time (each worker its own slot,
  `first_slot` on); outcomes in the order of `sources`. `progress(i,
  outcome)` is called as each finishes. Two pools running at once need
  disjoint slots."""
  if not isinstance(workers, int) or workers < 1:
    raise ValueError(f"workers must be an int >= 1; got {workers!r}.")
  free = list(range(first_slot, first_slot + workers))
  lock = threading.Lock()

  def one(i):
    with lock:
      slot = free.pop()
    try:
      outcome = run_python(sources[i], limits, slot)
    finally:
      with lock:
        free.append(slot)
    if progress is not None:
      progress(i, outcome)
    return outcome

  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    return list(pool.map(one, range(len(sources))))
