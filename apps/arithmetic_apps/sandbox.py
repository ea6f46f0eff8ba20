"""A sandbox for model-written code: each program alone in a minimal root,
under limits that cover its whole process tree, and nothing of it left
afterwards; a pass only on positive proof from a check that runs outside.

  outcome = run_python("print(1 + 1)")          # how a program ended
  outcome.status, outcome.exit_code, outcome.output   # 'exited' 0 '2\\n'

  def check(candidate):                         # trusted code, this process
    assert candidate(2, 3) == 5
  verdict = run_checked("def add(a, b):\\n    return a + b\\n", "add", check)
  verdict.passed, verdict.status, verdict.calls     # True 'passed' 1

A pass is never read from the program: not from its exit status, not from
what it prints. `run_checked` loads the program as a module in the sandbox
and `check` runs here, outside, with a stand-in for the program's function:
each call crosses to the sandbox as plain data (None, bool, int, float,
complex, str, bytes, and lists, tuples, dicts, sets of them; see
`sandbox_harness`), and what comes back is rebuilt here as fresh builtin
objects. So the check's comparisons are Python's own on Python's own
types (a returned object cannot bring its `__eq__`), the tests and any
reference solution never enter the sandbox, and the verdict is `check`
returning: any exit, exception or signal of the program before it answers
every call fails the run, as does any exception of the check.

What a program sees (`isolation()` names the mode; the program runs under
bubblewrap, `bwrap`, from the OS packages):

  root         an empty tmpfs, read-only, holding only the Python runtime
               bound read-only at its own paths (the interpreter, the
               standard library without site-packages, the shared
               libraries they load) and the harness; no /etc, /home,
               project, dataset or installed packages; /proc of its own
               PID namespace, a minimal /dev
  writable     /tmp (its working directory) and /dev/shm, each a fresh
               tmpfs of `tmpfs_bytes`, gone with the run
  namespaces   new mount, PID, network (loopback only), IPC, UTS and
               cgroup namespaces: no host process, socket (TCP, abstract or
               on the filesystem), System V IPC object, or hostname
  user         as root: uid/gid 61000 + pool slot, no supplementary
               groups, no capabilities, no new privileges (without root:
               a user namespace, the caller's uid outside)
  limits       the tree: memory (no swap), processes and one core of CPU
               by a control group per slot (`sandbox_cgroups`; as root
               where memory and pids controllers can be delegated);
               each process: RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE, 64 files,
               no core, RLIMIT_NPROC for the slot's uid (as root); the wall
               clock by the parent
  calls        a seccomp filter (`sandbox_seccomp`) refuses the kernel's
               keyrings (a uid's keyring outlives its processes) and new
               user namespaces
  environment  PATH, HOME=/tmp, PWD=/tmp, LANG=C.UTF-8, PYTHONHASHSEED=0;
               `python -s -S -P -B -u`
  output       stdout and stderr together, at most `output_bytes`: a
               program that prints more is killed

After a run its control group is emptied (every process killed) and
removed, and its namespaces die with their last process: no process, IPC
object, listener or file remains.

Isolation is never weakened silently: without bwrap `isolation()` raises
`SandboxUnavailable`, and a run without isolation happens only when a
caller passes `isolation="none"` by name (the program then runs as the
caller in a temporary folder with the rlimits alone; a pass still needs
the outside check). Every outcome names the isolation it ran under.

Statuses of `run_python` (how the process ended; never a pass): exited
(with `exit_code`), timeout (wall clock), cpu (SIGXCPU), memory (the
control group's OOM kill), output (printed too much), killed (another
signal), error (the sandbox could not run it). `run_checked` adds passed,
failed (the check failed), raised (the program raised, while loading or
in a call; a MemoryError is "memory"), invalid (it answered with
something that is not plain data) and exited (it ended before answering).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import glob
import json
import os
import platform
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Callable, List, Optional, Sequence, Tuple

from arithmetic_apps import sandbox_cgroups, sandbox_harness, sandbox_seccomp

FIRST_UID = 61000
UNISOLATED = "none"
_HARNESS = os.path.abspath(sandbox_harness.__file__)
_INSIDE = "/harness/sandbox_harness.py"
_FLAGS = ("-s", "-S", "-P", "-B", "-u")
# Writes its pid into each control group file given, then executes the
# rest (`--` and the bwrap command): the tree starts inside its groups.
_JOIN = ('for f do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done; '
         'while [ "$1" != -- ]; do shift; done; shift; exec "$@"')


class SandboxUnavailable(RuntimeError):
  """The sandbox cannot run here (and no caller asked for no isolation)."""


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one program may use.

  Attributes:
    wall_seconds: wall-clock limit of the run (then everything is killed).
    cpu_seconds: CPU time of each process (RLIMIT_CPU); the tree as a
      whole gets at most one core (cgroup) for `wall_seconds`.
    memory_bytes: memory of the whole tree (cgroup, no swap), and the
      address space of each process (RLIMIT_AS).
    processes: processes of the whole tree (cgroup, plus bwrap's two and
      `timeout`) and of the slot's uid (RLIMIT_NPROC).
    file_bytes: largest file it may write (RLIMIT_FSIZE).
    tmpfs_bytes: size of /tmp (its working directory), and of /dev/shm.
    output_bytes: stdout + stderr read before it is killed.
    message_bytes: largest call or answer of `run_checked`, encoded.
    max_source_bytes: longest program accepted.
  """

  wall_seconds: float = 10.0
  cpu_seconds: int = 5
  memory_bytes: int = 1 << 30
  processes: int = 32
  file_bytes: int = 1 << 20
  tmpfs_bytes: int = 16 << 20
  output_bytes: int = 64 << 10
  message_bytes: int = 1 << 20
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
  """How a program run by `run_python` ended (a run is not a pass).

  Attributes:
    status: exited, timeout, cpu, memory, output, killed or error.
    exit_code: its exit status when it exited (None otherwise).
    reason: one line: the last line of its output, or the limit hit.
    output: the first `output_bytes` of stdout + stderr (decoded, replaced).
    seconds: wall-clock time, start to end.
    isolation: what it ran under (`isolation()`, or "none").
  """

  status: str
  exit_code: Optional[int]
  reason: str
  output: str
  seconds: float
  isolation: str


@dataclasses.dataclass(frozen=True)
class Verdict:
  """Whether a program passed a check (`run_checked`).

  Attributes:
    passed: the check returned, every call was answered with plain data,
      and no limit was hit.
    status: passed, failed, raised, invalid, exited, timeout, cpu, memory,
      output, killed or error.
    reason: one line: the failed assertion, the exception, the limit.
    calls: calls of the program's function the check made.
    output: the first `output_bytes` of the program's stdout + stderr.
    seconds: wall-clock time, start to verdict.
    isolation: what it ran under (`isolation()`, or "none").
  """

  passed: bool
  status: str
  reason: str
  calls: int
  output: str
  seconds: float
  isolation: str


@dataclasses.dataclass(frozen=True)
class Runtime:
  """The Python the sandbox runs: bound read-only at the same paths.

  Attributes:
    executable: the interpreter (the real file behind a virtualenv's link).
    stdlib: the standard library folder (with lib-dynload).
    hidden: folders inside it covered by an empty one (site-packages).
    libraries: the shared libraries the interpreter and the standard
      library's extension modules load.
  """

  executable: str
  stdlib: str
  hidden: Tuple[str, ...]
  libraries: Tuple[str, ...]


def _ldd_paths(text: str) -> List[str]:
  """Absolute paths in `ldd` output.

  >>> _ldd_paths("a.so:\\n\\tlinux-vdso.so.1 (0x1)\\n"
  ...            "\\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\\n"
  ...            "\\tlibz.so.1 => not found\\n\\t/lib64/ld-linux-x86-64.so.2 (0x3)\\n")
  ['/lib/x86_64-linux-gnu/libc.so.6', '/lib64/ld-linux-x86-64.so.2']
  """
  paths = []
  for line in text.splitlines():
    if not line.startswith("\t"):
      continue
    target = line.split("=>")[-1].strip().split(" (")[0].strip()
    if target.startswith("/") and target not in paths:
      paths.append(target)
  return paths


@functools.lru_cache(maxsize=None)
def runtime() -> Runtime:
  """This interpreter's runtime files (found once per process)."""
  executable = os.path.realpath(sys.executable)
  stdlib = os.path.dirname(os.path.realpath(os.__file__))
  hidden = tuple(p for p in (os.path.join(stdlib, "site-packages"),
                             os.path.join(stdlib, "dist-packages"))
                 if os.path.isdir(p))
  if shutil.which("ldd") is None:
    raise SandboxUnavailable("ldd (libc-bin) is needed to find the shared "
                             "libraries Python loads")
  files = [executable] + sorted(glob.glob(
      os.path.join(stdlib, "lib-dynload", "*.so")))
  done = subprocess.run(["ldd"] + files, capture_output=True, text=True,
                        check=False)
  return Runtime(executable, stdlib, hidden, tuple(_ldd_paths(done.stdout)))


def _ancestors(paths: Sequence[str]) -> List[str]:
  """Every folder above the paths, parents first.

  >>> _ancestors(["/a/b/c.so", "/a/d", "/e/f"])
  ['/a', '/e', '/a/b']
  """
  found = set()
  for path in paths:
    parent = os.path.dirname(path)
    while parent not in ("/", ""):
      found.add(parent)
      parent = os.path.dirname(parent)
  return sorted(found, key=lambda p: (p.count("/"), p))


def bwrap_arguments(rt: Runtime, limits: Limits, as_root: bool) -> List[str]:
  """What the program may see, as bubblewrap's declarative list (the
  command and the harness's arguments follow)."""
  args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
          "--unshare-cgroup", "--hostname", "sandbox",
          "--die-with-parent", "--new-session"]
  if as_root:  # the harness needs exactly these to become the slot's user
    args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
             "--cap-add", "CAP_SETGID"]
  else:
    args += ["--unshare-user"]
  bound = [rt.executable, rt.stdlib, *rt.libraries, _INSIDE]
  for folder in _ancestors(bound):  # else bwrap makes them 0700
    args += ["--perms", "0755", "--dir", folder]
  args += ["--ro-bind", rt.executable, rt.executable,
           "--ro-bind", rt.stdlib, rt.stdlib]
  for folder in rt.hidden:
    args += ["--tmpfs", folder, "--remount-ro", folder]
  for lib in rt.libraries:
    args += ["--ro-bind", lib, lib]
  size = str(int(limits.tmpfs_bytes))
  args += ["--ro-bind", _HARNESS, _INSIDE,
           "--proc", "/proc", "--dev", "/dev",
           "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
           "--remount-ro", "/dev",
           "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
           "--remount-ro", "/",
           "--clearenv", "--setenv", "PATH", os.path.dirname(rt.executable),
           "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
           "--setenv", "PYTHONHASHSEED", "0", "--chdir", "/tmp"]
  return args


def _rlimits(limits: Limits, slot_uid: bool) -> dict:
  out = {"RLIMIT_AS": int(limits.memory_bytes),
         "RLIMIT_CPU": int(limits.cpu_seconds),
         "RLIMIT_FSIZE": int(limits.file_bytes),
         "RLIMIT_NOFILE": 64, "RLIMIT_CORE": 0}
  if slot_uid:  # counted per uid: only meaningful for the slot's own uid
    out["RLIMIT_NPROC"] = int(limits.processes)
  return out


_PROBE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _probe() -> str:
  """The isolation this machine gives, checked by running a program (once
  per process: callers hold `_PROBE_LOCK`)."""
  if sys.platform != "linux":
    raise SandboxUnavailable("the sandbox needs Linux namespaces")
  if shutil.which("bwrap") is None:
    raise SandboxUnavailable(
        "bubblewrap is not installed (apt-get install bubblewrap); pass "
        "isolation='none' to run model-written code without isolation")
  layout = sandbox_cgroups.layout()
  name = "+".join(["bwrap"] + ["seccomp"] * (_filter() is not None) +
                  [layout.name if layout else "rlimits"])
  # Slot 999's uid, and a group of this process's own: two processes may
  # probe at once.
  outcome = _run(b"print('ok')", Limits(), 999, name, "run",
                 group=f"probe-{os.getpid()}")
  if (outcome.status, outcome.output) != ("exited", "ok\n"):
    raise SandboxUnavailable(f"bwrap could not run a program here: "
                             f"{outcome.status}: {outcome.output[-500:]}")
  return name


def _filter() -> Optional[bytes]:
  return sandbox_seccomp.bpf_program(platform.machine())


def isolation() -> str:
  """What `run_python` and `run_checked` run under here: bubblewrap, then
  "seccomp" where `sandbox_seccomp` has a filter for this machine, then
  the limits: "cgroup-v1" or "cgroup-v2" (on the tree) or "rlimits" (per
  process, without root or cgroups). "bwrap+seccomp+cgroup-v1" on this
  project's machines. Raises `SandboxUnavailable` where bubblewrap cannot
  run."""
  with _PROBE_LOCK:
    return _probe()


def _resolve(isolation_: Optional[str]) -> str:
  if isolation_ is None:
    return isolation()
  if isolation_ != UNISOLATED:
    raise ValueError(f"isolation must be None (the sandbox) or "
                     f"{UNISOLATED!r} (no isolation, by name); got "
                     f"{isolation_!r}.")
  return UNISOLATED


class _Process:
  """One program in the sandbox: started inside its groups, its output
  drained (and cut at the limit), and killed and cleaned up by `end`."""

  def __init__(self, source: bytes, limits: Limits, slot: int, mode: str,
               run_mode: str, entry: Optional[str] = None,
               group: Optional[str] = None):
    self.limits, self.mode = limits, mode
    self.start = time.monotonic()
    self.deadline = self.start + limits.wall_seconds
    self.output = bytearray()
    self.too_much = threading.Event()
    self.group = None
    self.workdir = None
    self.requests = self.responses = None
    child_fds = []
    config = dict(mode=run_mode, max_source_bytes=int(limits.max_source_bytes))
    if run_mode == "serve":
      req_r, self.requests = os.pipe()
      self.responses, resp_w = os.pipe()
      child_fds = [req_r, resp_w]
      config.update(entry=entry, requests_fd=req_r, responses_fd=resp_w)
    as_root = os.geteuid() == 0
    slot_uid = mode != UNISOLATED and as_root
    config["limits"] = _rlimits(limits, slot_uid)
    if slot_uid:
      config.update(uid=FIRST_UID + slot, gid=FIRST_UID + slot)
    rt = runtime()
    if mode == UNISOLATED:
      self.workdir = tempfile.mkdtemp(prefix="sandbox-")
      command = [rt.executable, *_FLAGS, _HARNESS, json.dumps(config)]
      env = {"PATH": os.path.dirname(rt.executable), "HOME": self.workdir,
             "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    else:
      self.bwrap = shutil.which("bwrap")
      seccomp = []
      if "seccomp" in mode:  # bwrap reads the filter from a pipe
        filter_r, filter_w = os.pipe()
        os.write(filter_w, _filter())
        os.close(filter_w)
        child_fds.append(filter_r)
        seccomp = ["--seccomp", str(filter_r)]
      command = [self.bwrap, *bwrap_arguments(rt, limits, as_root),
                 *seccomp, "--", rt.executable, *_FLAGS, _INSIDE,
                 json.dumps(config)]
      env = {"PATH": os.defpath}
      # Should this process die mid-run, `timeout` (coreutils) still ends
      # bwrap, and the sandbox dies with it (--die-with-parent).
      stopper = shutil.which("timeout")
      if stopper is not None:
        command = [stopper, "-s", "KILL",
                   str(int(limits.wall_seconds) + 10), *command]
    try:
      layout = sandbox_cgroups.layout() if "cgroup" in mode else None
      if layout is not None:
        self.group = sandbox_cgroups.SlotGroup(layout, group or f"slot-{slot}")
        # The tree also holds bwrap's two processes (and timeout).
        ours = 2 + (command[0] != self.bwrap)
        self.group.create(int(limits.memory_bytes),
                          int(limits.processes) + ours)
        command = ["/bin/sh", "-c", _JOIN, "sandbox-join",
                   *self.group.procs_files, "--", *command]
      self.proc = subprocess.Popen(
          command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
          stderr=subprocess.STDOUT, close_fds=True, pass_fds=child_fds,
          start_new_session=True, cwd=self.workdir or "/", env=env,
          umask=0o022)  # bwrap makes the root's folders: 0755, whatever ours is
    except OSError:
      self._clean()
      raise
    finally:
      for fd in child_fds:
        os.close(fd)
    threading.Thread(target=self._feed, args=(source,), daemon=True).start()
    self.drain = threading.Thread(target=self._drain, daemon=True)
    self.drain.start()

  def _feed(self, source: bytes) -> None:
    try:
      self.proc.stdin.write(source)
      self.proc.stdin.close()
    except OSError:
      pass

  def _drain(self) -> None:
    while True:
      chunk = self.proc.stdout.read1(1 << 16)
      if not chunk:
        return
      room = self.limits.output_bytes - len(self.output)
      self.output.extend(chunk[:max(room, 0)])
      if len(chunk) > room:
        self.too_much.set()
        self.kill()
        return

  def kill(self) -> None:
    """SIGKILL to the launcher's process group (`timeout` and bwrap; the
    sandbox's process 1 dies with bwrap, and the PID namespace with it).
    `end` then empties the slot's control group, whatever is left."""
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass

  def end(self) -> Tuple[int, bool]:
    """Kills what is left and cleans up: (return code, OOM-killed)."""
    self.kill()
    self.proc.wait()
    oom = self.group is not None and self.group.oom_kills() > 0
    # What may still hold the output pipe goes before the drain is awaited:
    # the slot's group is emptied, and the requests pipe closed (a serving
    # harness reads its end and exits). bwrap's namespace init can outlive
    # the launcher's process group (it runs in a session of its own, and
    # its parent-death signal has been seen not to fire), and closing
    # stdout while the drain is blocked reading it waits on the reader's
    # lock forever: a run hung so.
    try:
      self._clean()
    finally:
      self.drain.join(timeout=5)
      if not self.drain.is_alive():
        self.proc.stdout.close()
    return self.proc.returncode, oom

  def _clean(self) -> None:
    for fd in (self.requests, self.responses):
      if fd is not None:
        os.close(fd)
    self.requests = self.responses = None
    if self.group is not None:
      self.group.destroy()
    if self.workdir is not None:
      shutil.rmtree(self.workdir, ignore_errors=True)

  def text(self) -> str:
    return bytes(self.output).decode("utf-8", "replace")


def _last_line(text: str) -> str:
  lines = [line for line in text.strip().splitlines() if line.strip()]
  return lines[-1][:300] if lines else ""


def _ended(returncode: int, oom: bool, output: str) -> Tuple[str, str]:
  """(status, reason) of a process that ended by itself: bwrap returns the
  program's exit status, or 128 + the signal that killed it."""
  sig = -returncode if returncode < 0 else (
      returncode - 128 if returncode > 128 else 0)
  if oom:
    return "memory", "the tree's memory limit (killed by the kernel)"
  if sig == signal.SIGXCPU:
    return "cpu", "CPU-time limit"
  if sig == signal.SIGXFSZ:
    return "killed", "file-size limit"
  if sig in signal.valid_signals():
    return "killed", f"killed by signal {signal.Signals(sig).name}"
  return "exited", _last_line(output) or f"exit status {returncode}"


def _check_args(source, limits, slot) -> bytes:
  if not isinstance(source, str):
    raise TypeError(f"source must be a str; got {type(source).__name__}.")
  if not isinstance(limits, Limits):
    raise TypeError(f"limits must be a Limits; got {type(limits).__name__}.")
  if not isinstance(slot, int) or isinstance(slot, bool) or \
      not 0 <= slot < 1000:
    raise ValueError(f"slot must be an int in [0, 1000); got {slot!r}.")
  return source.encode("utf-8", "replace")


def _too_long(data: bytes, limits: Limits) -> Optional[str]:
  if len(data) > limits.max_source_bytes:
    return f"the program is longer than max_source_bytes ({len(data)} bytes)"
  return None


def _run(data: bytes, limits: Limits, slot: int, mode: str, run_mode: str,
         group: Optional[str] = None) -> Outcome:
  try:
    process = _Process(data, limits, slot, mode, run_mode, group=group)
  except OSError as e:
    return Outcome("error", None, f"could not start: {e}", "", 0.0, mode)
  timed_out = False
  try:
    process.proc.wait(timeout=limits.wall_seconds)
  except subprocess.TimeoutExpired:
    timed_out = True
  returncode, oom = process.end()
  output = process.text()
  if process.too_much.is_set():
    status, reason = "output", "printed more than the output limit"
  elif timed_out:
    status, reason = "timeout", "wall-clock limit"
  elif returncode == 125 and process.group is not None and not output:
    status, reason = "error", "could not join the slot's control group"
  else:
    status, reason = _ended(returncode, oom, output)
  code = returncode if status == "exited" else None
  return Outcome(status, code, reason, output,
                 time.monotonic() - process.start, mode)


def run_python(source: str, limits: Limits = Limits(), slot: int = 0,
               isolation: Optional[str] = None) -> Outcome:
  """Runs Python `source` as `__main__` in the sandbox and says how it
  ended; never raises for what the program does (`ValueError` /
  `TypeError` for bad arguments, `SandboxUnavailable` without bwrap).

  Args:
    source: the program (a str).
    limits: a `Limits`.
    slot: the pool slot in [0, 1000): its uid and control group (two
      programs running at once must have different slots).
    isolation: None (the sandbox) or "none" (no isolation: only by name).
  """
  data = _check_args(source, limits, slot)
  mode = _resolve(isolation)
  if _too_long(data, limits):
    return Outcome("error", None, _too_long(data, limits), "", 0.0, mode)
  return _run(data, limits, slot, mode, "run")


class _Failed(BaseException):
  """Raised into the check when the program failed a call (a
  BaseException, so that `except Exception` in a check does not hide it;
  the failure is recorded before, so no `except` can turn it into a
  pass)."""


class _Candidate:
  """The program's function as the check sees it: arguments go to the
  sandbox as plain data, the answer comes back as fresh plain data."""

  def __init__(self, process: _Process, entry: str):
    self._process, self._entry = process, entry
    self.calls = 0
    self.failure: Optional[Tuple[str, str]] = None
    self.check_error: Optional[str] = None

  def __repr__(self):
    return f"<sandboxed {self._entry}>"

  def _fail(self, status: str, reason: str):
    if self.failure is None:
      self.failure = (status, reason)
    raise _Failed(reason)

  def __call__(self, *args, **kwargs):
    if self.failure is not None:
      raise _Failed(self.failure[1])
    try:
      call = {"args": sandbox_harness.to_wire(list(args)),
              "kwargs": sandbox_harness.to_wire(dict(kwargs))}
    except sandbox_harness.NotPlain as e:
      self.check_error = f"the check passed an argument that is not plain " \
                         f"data: {e}"
      self._fail("error", self.check_error)
    data = sandbox_harness.frame({"call": call})
    if len(data) > self._process.limits.message_bytes:
      self.check_error = "the check's arguments exceed message_bytes"
      self._fail("error", self.check_error)
    self.calls += 1
    if not _send(self._process, data):
      self._fail("exited", "the program ended before answering")
    message = _receive(self._process)
    if isinstance(message, tuple):
      self._fail(*message)
    return self._answer(message)

  def _answer(self, message):
    if set(message) == {"return"}:
      try:
        return sandbox_harness.from_wire(message["return"])
      except (sandbox_harness.NotPlain, RecursionError) as e:
        self._fail("invalid", f"an answer that is not plain data: {e}")
    if set(message) == {"raise"} and isinstance(message["raise"], str):
      reason = message["raise"][:300]
      self._fail("memory" if reason.startswith("MemoryError") else "raised",
                 reason)
    if set(message) == {"refuse"} and isinstance(message["refuse"], str):
      self._fail("invalid", f"returned {message['refuse'][:300]}")
    self._fail("invalid", "a malformed answer")


def _send(process: _Process, data: bytes) -> bool:
  """Writes a request before the deadline; False if the program's end of
  the pipe is gone or the deadline passed."""
  os.set_blocking(process.requests, False)
  view = memoryview(data)
  while view:
    left = process.deadline - time.monotonic()
    if left <= 0:
      return False
    _, ready, _ = select.select([], [process.requests], [], left)
    if ready:
      try:
        view = view[os.write(process.requests, view):]
      except BlockingIOError:
        continue
      except OSError:  # EPIPE: nobody reads any more
        return False
  return True


def _receive(process: _Process):
  """The next answer (a dict), or (status, reason) when none comes: the
  program ended, the deadline passed, or the frame is malformed."""
  head = _read(process, 4)
  if isinstance(head, tuple):
    return head
  size = struct.unpack(">I", head)[0]
  if size > process.limits.message_bytes:
    return "invalid", "an answer longer than message_bytes"
  body = _read(process, size)
  if isinstance(body, tuple):
    return body
  try:
    message = json.loads(body)
  except (ValueError, RecursionError, MemoryError):
    return "invalid", "an answer that is not JSON"
  if not isinstance(message, dict):
    return "invalid", "a malformed answer"
  return message


def _read(process: _Process, n: int):
  chunks = []
  while n:
    left = process.deadline - time.monotonic()
    if left <= 0:
      return "timeout", "wall-clock limit"
    ready, _, _ = select.select([process.responses], [], [], left)
    if not ready:
      continue
    chunk = os.read(process.responses, min(n, 1 << 20))
    if not chunk:
      return "exited", "the program ended before answering"
    chunks.append(chunk)
    n -= len(chunk)
  return b"".join(chunks)


def _check_failure(error: BaseException) -> str:
  """'AssertionError: <the assert's line>' for a failed assertion of the
  check, 'TypeError: <message>' for another exception."""
  frames = traceback.extract_tb(error.__traceback__)
  line = frames[-1].line if frames else ""
  if line and isinstance(error, AssertionError):
    return f"AssertionError: {line}"[:300]
  return sandbox_harness._describe(error)[:300]  # pylint: disable=protected-access


def run_checked(source: str, entry_point: str,
                check: Callable[[Callable], None], limits: Limits = Limits(),
                slot: int = 0, isolation: Optional[str] = None) -> Verdict:
  """Loads `source` as a module in the sandbox and runs `check(candidate)`
  here, `candidate` standing for its function `entry_point`: passed only
  when `check` returns, every call was answered with plain data in time,
  and no limit was hit. Never raises for what the program does.

  Args:
    source: the program (its `if __name__ == "__main__":` block does not
      run: it is loaded as the module `solution`).
    entry_point: the name of the function the check calls.
    check: trusted code, run in this thread; calls `candidate(*args,
      **kwargs)` with plain data and gets plain data back.
    limits, slot, isolation: as for `run_python`.
  """
  data = _check_args(source, limits, slot)
  if not isinstance(entry_point, str) or not entry_point.isidentifier():
    raise ValueError(f"entry_point must be a Python name; got "
                     f"{entry_point!r}.")
  if not callable(check):
    raise TypeError(f"check must be callable; got {type(check).__name__}.")
  mode = _resolve(isolation)
  if _too_long(data, limits):
    return Verdict(False, "error", _too_long(data, limits), 0, "", 0.0, mode)
  try:
    process = _Process(data, limits, slot, mode, "serve", entry_point)
  except OSError as e:
    return Verdict(False, "error", f"could not start: {e}", 0, "", 0.0, mode)
  candidate = _Candidate(process, entry_point)
  failed = None
  ready = _receive(process)
  if isinstance(ready, tuple):
    candidate.failure = ready
  elif ready.get("raise") and ready.get("loading"):
    reason = f"while loading: {str(ready['raise'])[:300]}"
    candidate.failure = ("memory" if "MemoryError" in reason[:30]
                         else "raised", reason)
  elif ready != {"ready": True}:
    candidate.failure = ("invalid", "a malformed first message")
  else:
    try:
      check(candidate)
    except _Failed:
      pass
    except Exception as e:  # noqa: B902 - the check's failure, any kind
      failed = _check_failure(e)
  late = time.monotonic() > process.deadline
  if candidate.failure is not None and candidate.failure[0] == "exited":
    try:  # let it finish ending, to say how it ended
      process.proc.wait(timeout=max(0.0, min(
          1.0, process.deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
      pass
  returncode, oom = process.end()
  output = process.text()
  if process.too_much.is_set():
    status, reason = "output", "printed more than the output limit"
  elif oom:
    status, reason = "memory", "the tree's memory limit (killed by the kernel)"
  elif candidate.check_error is not None:
    status, reason = "error", candidate.check_error
  elif candidate.failure is not None:
    status, reason = candidate.failure
    if status == "exited":  # how it ended, from its exit status
      status, reason = _ended(returncode, oom, output)
      reason = reason if status != "exited" else \
          f"ended before answering: {reason}"
  elif failed is not None:
    status, reason = "failed", failed
  elif late:
    status, reason = "timeout", "wall-clock limit"
  else:
    status, reason = "passed", ""
  return Verdict(status == "passed", status, reason, candidate.calls, output,
                 time.monotonic() - process.start, mode)


def pool_map(fn: Callable, items: Sequence, workers: int = 2,
             first_slot: int = 0,
             progress: Optional[Callable[[int, object], None]] = None
             ) -> list:
  """`fn(item, slot)` for every item, `workers` at a time, each worker on
  its own slot (`first_slot` on); results in the order of `items`.
  `progress(i, result)` is called as each finishes. Two pools running at
  once need disjoint slots.

  >>> pool_map(lambda x, slot: (x * x, slot), [3, 4], workers=1, first_slot=7)
  [(9, 7), (16, 7)]
  """
  if not isinstance(workers, int) or isinstance(workers, bool) or \
      workers < 1:
    raise ValueError(f"workers must be an int >= 1; got {workers!r}.")
  if not isinstance(first_slot, int) or first_slot < 0 or \
      first_slot + workers > 1000:
    raise ValueError(f"first_slot must be an int with first_slot + workers "
                     f"<= 1000; got {first_slot!r}.")
  free = list(range(first_slot, first_slot + workers))
  lock = threading.Lock()

  def one(i):
    with lock:
      slot = free.pop()
    try:
      result = fn(items[i], slot)
    finally:
      with lock:
        free.append(slot)
    if progress is not None:
      progress(i, result)
    return result

  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    return list(pool.map(one, range(len(items))))
