"""The sandbox: what a program sees of the host (nothing), what it can do
to it (nothing that lasts), and the plain-data calls of `run_checked`.

Each hostile program runs in the sandbox (never in this process) and is
followed by checks of the host itself (`sandbox_host.Host`): no process of
the slot's uid, no control group of the slot, no System V IPC object or TCP
socket of the uid, the probe folder as it was; and the next program runs.
Where the sandbox cannot run (no bubblewrap, no namespaces) these tests
skip, naming why; CI sets REQUIRE_SANDBOX=1, which makes them run and fail
instead. The tests of limits on the whole process tree need root and cgroup
controllers (skipped, with the reason, elsewhere).
"""

import dataclasses
import errno
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import sandbox_host
from arithmetic_apps import (sandbox, sandbox_cgroups, sandbox_harness,
                             sandbox_seccomp)
from arithmetic_apps.sandbox import Limits, run_checked, run_python
from arithmetic_apps.verifiable import humaneval
from sandbox_host import Host, needs_sandbox, needs_tree_limits

SLOT = sandbox_host.slot(1)
_NR = {"add_key": 248, "keyctl": 250} if os.uname().machine == "x86_64" \
    else {"add_key": 217, "keyctl": 219}
LIMITS = Limits(wall_seconds=6, cpu_seconds=2, memory_bytes=512 << 20,
                processes=16, output_bytes=4096)


def _limits(**changes):
  return dataclasses.replace(LIMITS, **changes)


@pytest.fixture()
def probe_folder():
  """A world-writable folder on the host's disk (not under /tmp) holding a
  world-readable file."""
  folder = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        f".sandbox-probe-{os.getpid()}-{SLOT}")
  os.makedirs(folder, exist_ok=True)
  os.chmod(folder, 0o777)
  path = os.path.join(folder, "keep.txt")
  with open(path, "w") as f:
    f.write("host data")
  os.chmod(path, 0o666)
  yield folder, path
  for name in os.listdir(folder):
    os.remove(os.path.join(folder, name))
  os.rmdir(folder)


def _run(source, limits=LIMITS, **fmt):
  return run_python(textwrap.dedent(source).format(**fmt), limits, slot=SLOT)


def _report(outcome):
  """The JSON a probe program printed last."""
  assert outcome.status == "exited" and outcome.exit_code == 0, outcome
  return json.loads(outcome.output.strip().splitlines()[-1])


# --- What the program sees ---------------------------------------------


@needs_sandbox
def test_the_program_sees_nothing_of_the_host(probe_folder):
  folder, path = probe_folder
  rt = sandbox.runtime()
  host_paths = [
      os.path.abspath(__file__),                      # the project
      os.path.join(os.path.dirname(os.path.dirname(
          os.path.abspath(__file__))), ".git", "config"),
      humaneval.data_path(),                          # the dataset
      os.path.dirname(os.path.dirname(humaneval.data_path())),  # site-packages
      path, folder,                                   # world-readable files
      "/etc/passwd", "/etc/hostname", "/home", "/usr/bin", "/bin/sh",
      "/sys/fs/cgroup", "/var", "/work"]
  host_paths = [p for p in host_paths if os.path.exists(p)]
  assert len(host_paths) >= 8
  host = Host(SLOT, folder)
  report = _report(_run(r'''
      import json, os, socket
      def seen(p):
          try:
              os.stat(p)
              return True
          except OSError:
              return False
      status = dict(l.split(":\t", 1) for l in open("/proc/self/status")
                    .read().splitlines() if ":\t" in l)
      print(json.dumps({{
          "ids": [os.getuid(), os.getgid(), os.getgroups()],
          "cwd": os.getcwd(), "env": dict(os.environ),
          "root": sorted(os.listdir("/")),
          "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
          "net": [l.split(":")[0].strip()
                  for l in open("/proc/net/dev").readlines()[2:]],
          "hostname": socket.gethostname(),
          "cgroups": sorted({{l.strip().split(":", 2)[2]
                             for l in open("/proc/self/cgroup")}}),
          "caps": status["CapEff"], "no_new_privs": status["NoNewPrivs"],
          "site": os.listdir({site!r}),
          "seen": [p for p in {paths!r} if seen(p)],
      }}))
      ''', site=rt.hidden[0] if rt.hidden else "/tmp", paths=host_paths))
  assert report["seen"] == []
  assert report["site"] == []  # site-packages is an empty folder
  tops = {p.split("/")[1] for p in (rt.executable, rt.stdlib, *rt.libraries)}
  assert report["root"] == sorted(tops | {"dev", "harness", "proc", "tmp"})
  assert report["cwd"] == "/tmp"
  assert report["env"] == {"HOME": "/tmp", "LANG": "C.UTF-8",
                           "PATH": os.path.dirname(rt.executable),
                           "PWD": "/tmp", "PYTHONHASHSEED": "0"}
  assert report["net"] == ["lo"]  # a network namespace of its own
  assert report["hostname"] == "sandbox"  # a UTS namespace
  assert report["cgroups"] == ["/"]  # a cgroup namespace
  assert report["pids"] == [1, 2]  # bwrap's process 1, and the program
  if os.geteuid() == 0:
    uid = sandbox.FIRST_UID + SLOT
    assert report["ids"] == [uid, uid, []]
    assert int(report["caps"], 16) == 0
    assert report["no_new_privs"] == "1"
  host.assert_unchanged()


@needs_sandbox
def test_only_tmp_and_dev_shm_are_writable_and_they_are_small(probe_folder):
  folder, _ = probe_folder
  host = Host(SLOT, folder)
  report = _report(_run(r'''
      import json, os
      def write(path, size):
          try:
              with open(path, "wb") as f:
                  for _ in range(size >> 20):
                      f.write(b"x" * (1 << 20))
              return "ok"
          except OSError as e:
              return e.strerror
      print(json.dumps({{
          "tmp": write("/tmp/a", 1 << 20), "shm": write("/dev/shm/a", 1 << 20),
          "tmp_full": write("/tmp/b", 64 << 20),
          "shm_full": write("/dev/shm/b", 64 << 20),
          "root": write("/x", 1 << 20), "dev": write("/dev/x", 1 << 20),
          "stdlib": write({stdlib!r} + "/x.py", 1 << 20),
          "host": write({folder!r} + "/new.txt", 1 << 20),
      }}))
      ''', stdlib=sandbox.runtime().stdlib, folder=folder,
      limits=_limits(file_bytes=128 << 20, tmpfs_bytes=8 << 20)))
  assert report == {"tmp": "ok", "shm": "ok", "tmp_full": "No space left on "
                    "device", "shm_full": "No space left on device",
                    "root": "Read-only file system",
                    "dev": "Read-only file system",
                    "stdlib": "Read-only file system",
                    "host": "No such file or directory"}
  host.assert_unchanged()


# --- Hostile programs ---------------------------------------------------


@needs_sandbox
def test_sockets_of_the_host_are_unreachable(probe_folder):
  folder, _ = probe_folder
  path = os.path.join(folder, "host.sock")
  listeners = []
  for family, address in ((socket.AF_UNIX, path),
                          (socket.AF_UNIX, f"\0sandbox-probe-{os.getpid()}"),
                          (socket.AF_INET, ("127.0.0.1", 0))):
    s = socket.socket(family)
    s.bind(address)
    s.listen(1)
    s.setblocking(False)
    listeners.append(s)
  port = listeners[2].getsockname()[1]
  host = Host(SLOT, folder)
  report = _report(_run(r'''
      import json, socket
      def connect(family, address):
          try:
              socket.socket(family).connect(address)
              return "connected"
          except OSError as e:
              return type(e).__name__
      tried = [connect(socket.AF_UNIX, {path!r}),
               connect(socket.AF_UNIX, {abstract!r}),
               connect(socket.AF_INET, ("127.0.0.1", {port}))]
      # It may listen as it likes: in its own network namespace, where the
      # same port is its own.
      inside = socket.socket()
      inside.bind(("0.0.0.0", {port}))
      inside.listen(1)
      tried.append(connect(socket.AF_INET, ("127.0.0.1", {port})))
      print(json.dumps(tried))
      ''', path=path, abstract=f"\0sandbox-probe-{os.getpid()}", port=port))
  assert report == ["FileNotFoundError", "ConnectionRefusedError",
                    "ConnectionRefusedError", "connected"]
  for s in listeners:
    with pytest.raises(BlockingIOError):
      s.accept()
    s.close()
  host.assert_unchanged()
  os.remove(path)


@needs_sandbox
def test_system_v_ipc_objects_do_not_outlive_the_run():
  before = sandbox_host._ipc_objects()
  host = Host(SLOT)
  report = _report(_run(r'''
      import ctypes, json
      libc = ctypes.CDLL(None, use_errno=True)
      IPC_PRIVATE, IPC_CREAT = 0, 0o1000
      ids = [libc.shmget(IPC_PRIVATE, 64 << 20, IPC_CREAT | 0o666)
             for _ in range(4)]
      ids.append(libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o666))
      ids.append(libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o666))
      rows = sum(len(open("/proc/sysvipc/" + k).readlines()) - 1
                 for k in ("shm", "msg", "sem"))
      print(json.dumps([ids, rows]))   # and exits without removing them
      '''))
  ids, rows = report
  assert all(i >= 0 for i in ids) and rows == 6  # made, in its own namespace
  assert sandbox_host._ipc_objects() <= before  # none on the host
  host.assert_unchanged()


@needs_sandbox
@needs_tree_limits
def test_memory_limit_covers_the_whole_tree():
  sandbox_host.require_tree_limits()
  # Each child alone fits its RLIMIT_AS (256 MB); four together do not fit
  # the tree's 256 MB.
  host = Host(SLOT)
  outcome = _run(r'''
      import os, time
      for _ in range(4):
          if os.fork() == 0:
              block = b"x" * (150 << 20)   # written: really used
              time.sleep(1)
              os._exit(0)
      statuses = [os.wait()[1] for _ in range(4)]
      print(statuses)
      ''', limits=_limits(memory_bytes=256 << 20))
  assert outcome.status == "memory", outcome
  host.assert_unchanged()


@needs_sandbox
@needs_tree_limits
def test_process_limit_covers_the_whole_tree():
  sandbox_host.require_tree_limits()
  host = Host(SLOT)
  report = _report(_run(r'''
      import json, os, time
      started = 0
      for _ in range(64):
          try:
              if os.fork() == 0:
                  time.sleep(30)
                  os._exit(0)
              started += 1
          except OSError:
              pass
      print(json.dumps(started))
      ''', limits=_limits(processes=8)))
  assert report == 7  # 8 processes with the program itself
  host.assert_unchanged()


@needs_sandbox
@needs_tree_limits
def test_slots_make_and_remove_their_groups_at_once():
  # Slots share the base folder, which the last slot out removes: four
  # threads making and removing their groups 100 times each never collide
  # (a race here once failed a run as "error").
  sandbox_host.require_tree_limits()
  layout = sandbox_cgroups.layout()
  failures = []

  def churn(k):
    group = sandbox_cgroups.SlotGroup(layout, f"slot-{sandbox_host.slot(1, k)}")
    for _ in range(100):
      try:
        group.create(64 << 20, 4)
        group.destroy()
      except OSError as e:
        failures.append(e)

  threads = [threading.Thread(target=churn, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert failures == []
  for k in range(4):
    Host(sandbox_host.slot(1, k)).assert_unchanged()


@needs_sandbox
def test_daemons_die_with_the_run():
  host = Host(SLOT)
  outcome = _run(r'''
      import os, time
      if os.fork() == 0:
          os.setsid()
          if os.fork() == 0:   # a daemon: new session, parent gone
              time.sleep(1000)
          os._exit(0)
      os.wait()
      print("left a daemon behind")
      ''')
  assert (outcome.status, outcome.exit_code) == ("exited", 0)
  assert outcome.seconds < LIMITS.wall_seconds  # not waited for
  host.assert_unchanged()


@needs_sandbox
def test_it_cannot_signal_read_or_become_anything_of_the_host():
  host = Host(SLOT)
  report = _report(_run(r'''
      import ctypes, json, os, signal, subprocess, sys
      def attempt(f):
          try:
              f()
              return "done"
          except Exception as e:
              return type(e).__name__
      ppid = os.getppid()
      print(json.dumps({{
          "ppid": ppid,
          "kill_parent": attempt(lambda: os.kill(ppid, signal.SIGKILL)),
          "pidfd_parent": attempt(lambda: signal.pidfd_send_signal(
              os.pidfd_open(ppid), signal.SIGKILL)),
          "parent_env": attempt(lambda: open(f"/proc/{{ppid}}/environ").read()),
          "setuid_0": attempt(lambda: os.setuid(0)),
          "shell": attempt(lambda: subprocess.run(["/bin/sh", "-c", "id"])),
          "python": attempt(lambda: subprocess.run([sys.executable, "-c", "1"],
                                                   check=True)),
          "mount": ctypes.CDLL(None).mount(b"none", b"/tmp", b"tmpfs", 0, None),
          "hostname": attempt(lambda: open("/proc/sys/kernel/hostname", "w")
                              .write("x")),
      }}))
      '''))
  if os.geteuid() == 0:
    assert report == {"ppid": 1, "kill_parent": "PermissionError",
                      "pidfd_parent": "PermissionError",
                      "parent_env": "PermissionError",
                      "setuid_0": "PermissionError",
                      "shell": "FileNotFoundError", "python": "done",
                      "mount": -1, "hostname": "PermissionError"}
  else:
    assert report["shell"] == "FileNotFoundError" and report["mount"] == -1
  host.assert_unchanged()


@needs_sandbox
def test_keyrings_and_user_namespaces_are_refused():
  # A uid's user keyring outlives its processes: without the filter a run
  # could leave data there for the next run of its slot.
  host = Host(SLOT)
  first, second = (_report(_run(r'''
      import ctypes, json, os, subprocess, sys, threading
      libc = ctypes.CDLL(None, use_errno=True)
      def call(*args):
          return [libc.syscall(*args), ctypes.get_errno()]
      done = []
      thread = threading.Thread(target=done.append, args=("thread",))
      thread.start()
      thread.join()
      child = subprocess.run([sys.executable, "-c", "print('child')"],
                             capture_output=True, text=True).stdout.strip()
      print(json.dumps({{
          "add_key": call({add_key}, b"user", b"left", b"data", 4, -4),
          "keyctl": call({keyctl}, 10, -4, b"user", b"left", 0),
          "user_ns": [libc.unshare(0x10000000), ctypes.get_errno()],
          "still": done + [child]}}))
      ''', add_key=nr["add_key"], keyctl=nr["keyctl"])) for nr in [_NR] * 2)
  assert first == second == {"add_key": [-1, errno.EPERM],
                             "keyctl": [-1, errno.EPERM],
                             "user_ns": [-1, errno.EPERM],
                             "still": ["thread", "child"]}
  host.assert_unchanged()


def test_the_seccomp_filter_decides_as_documented():
  # The filter run by a small cBPF interpreter: (arch, nr, args[0]) ->
  # the action.
  program = sandbox_seccomp.bpf_program("x86_64")
  ops = [struct.unpack("=HBBI", program[i:i + 8])
         for i in range(0, len(program), 8)]

  def run(arch, nr, arg0=0):
    data = {0: nr, 4: arch, 16: arg0}
    acc, pc = 0, 0
    while True:
      code, jt, jf, k = ops[pc]
      pc += 1
      if code == 0x20:
        acc = data[k]
      elif code == 0x06:
        return k
      else:
        taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
        pc += jt if taken else jf

  x86, allow = 0xC000003E, 0x7FFF0000
  eperm, enosys = 0x50000 | errno.EPERM, 0x50000 | errno.ENOSYS
  assert [run(x86, nr) for nr in (248, 249, 250)] == [eperm] * 3
  assert run(x86, 435) == enosys  # clone3: glibc falls back to clone
  assert run(x86, 272, 0x10000000) == run(x86, 56, 0x10000011) == eperm
  assert run(x86, 272, 0x40000000) == run(x86, 56, 0x01200011) == allow
  assert [run(x86, nr) for nr in (0, 1, 57, 59, 231)] == [allow] * 5
  assert run(x86, 0x40000000 + 1) == run(0xC00000B7, 1) == 0x80000000
  assert sandbox_seccomp.bpf_program("riscv64") is None


@needs_sandbox
def test_sqlite_and_fifos_cannot_reach_the_host(probe_folder):
  folder, _ = probe_folder
  host = Host(SLOT, folder)
  report = _report(_run(r'''
      import json, os, sqlite3
      out = []
      for make in (lambda: sqlite3.connect({db!r}).execute("create table t(x)"),
                   lambda: os.mkfifo({fifo!r})):
          try:
              make()
              out.append("made")
          except Exception as e:
              out.append(type(e).__name__)
      print(json.dumps(out))
      ''', db=os.path.join(folder, "x.db"), fifo=os.path.join(folder, "fifo")))
  assert report == ["OperationalError", "FileNotFoundError"]
  host.assert_unchanged()


KILLERS = {
    # kill(-1) spares the caller and process 1: nothing else is visible.
    "kills everything it can": ("import os, signal\n"
                                "try:\n    os.kill(-1, signal.SIGKILL)\n"
                                "except ProcessLookupError:\n"
                                "    os.kill(os.getpid(), signal.SIGKILL)\n",
                                "killed"),
    "allocates 10 GB": ("x = bytearray(10 * 2**30)\n", "exited"),
    "sleeps forever": ("import time\ntime.sleep(1000)\n", "timeout"),
    "prints megabytes": ("import sys\nfor _ in range(100):\n"
                         "    sys.stdout.write('x' * 100000)\n", "output"),
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(KILLERS))
def test_ending_badly_is_contained_and_named(name, probe_folder):
  folder, _ = probe_folder
  source, status = KILLERS[name]
  host = Host(SLOT, folder)
  outcome = run_python(source, _limits(wall_seconds=1.5), slot=SLOT)
  assert outcome.status == status, outcome
  assert outcome.isolation == sandbox.isolation()
  if name == "allocates 10 GB":
    assert (outcome.exit_code, outcome.reason) == (1, "MemoryError")
  if name == "kills everything it can":
    assert outcome.reason == "killed by signal SIGKILL"
  host.assert_unchanged()
  after = run_python("print(6 * 7)", LIMITS, slot=SLOT)
  assert (after.status, after.output) == ("exited", "42\n")


SLOW_HOSTILE = {
    "infinite loop": ("while True:\n    pass\n", {"cpu"}),
    "fork bomb": ("import os, time\n"
                  "for _ in range(10000):\n"
                  "    try:\n        os.fork()\n"
                  "    except Exception:\n        pass\n"
                  "time.sleep(1000)\n", {"timeout"}),
    "threads and memory": ("import threading\nblocks = []\n"
                           "def eat():\n    while True:\n"
                           "        blocks.append(b'x' * (16 << 20))\n"
                           "for _ in range(8):\n"
                           "    threading.Thread(target=eat).start()\n",
                           # Whichever limit comes first: the address space
                           # (MemoryError), the cgroup, or, on a loaded host
                           # where threads allocating at the limit spend
                           # their second in the kernel, the CPU time.
                           {"exited", "memory", "cpu"}),
}


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("name", sorted(SLOW_HOSTILE))
def test_burning_programs_are_contained(name):
  source, statuses = SLOW_HOSTILE[name]
  host = Host(SLOT)
  outcome = run_python(source, _limits(wall_seconds=4, cpu_seconds=1),
                       slot=SLOT)
  assert outcome.status in statuses, outcome
  host.assert_unchanged()
  after = run_python("print(6 * 7)", LIMITS, slot=SLOT)
  assert (after.status, after.output) == ("exited", "42\n")


APPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "apps")
SYSTEM_PYTHON = "/usr/bin/python3"


def _readable_by_others(path):
  while path != "/":
    if not os.stat(path).st_mode & 0o005:
      return False
    path = os.path.dirname(path)
  return True


@needs_sandbox
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or
    not os.path.exists(SYSTEM_PYTHON) or not _readable_by_others(APPS),
    reason="runs the sandbox as uid 65534: needs root, setpriv, the OS's "
           "python3 and a checkout others can read")
def test_without_root_it_runs_in_a_user_namespace():
  code = textwrap.dedent(r'''
      import json
      from arithmetic_apps import sandbox
      outcome = sandbox.run_python(
          "import os, json\n"
          "print(json.dumps([os.getuid(), sorted(os.listdir('/'))]))\n")
      verdict = sandbox.run_checked("def f(x):\n    return 2 * x\n", "f",
                                    lambda f: f(21) == 42 or 1 / 0)
      print(json.dumps([sandbox.isolation(), outcome.output, verdict.status]))
      ''')
  done = subprocess.run(
      ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
       SYSTEM_PYTHON, "-c", code], capture_output=True, text=True, cwd="/",
      env={"PATH": os.defpath, "HOME": "/tmp", "PYTHONPATH": APPS},
      check=False)
  assert done.returncode == 0, done.stderr
  isolation, output, status = json.loads(done.stdout.splitlines()[-1])
  uid, root = json.loads(output)
  assert (isolation, uid, status) == ("bwrap+seccomp+rlimits", 65534,
                                      "passed")
  assert "harness" in root and "etc" not in root and "home" not in root


@pytest.mark.slow
@needs_sandbox
def test_processes_that_start_at_once_all_find_the_sandbox():
  # pytest's workers (and any two scorers) probe the sandbox at the same
  # moment: each probe uses groups of its own.
  probes = [subprocess.Popen(
      [sys.executable, "-c", "from arithmetic_apps import sandbox\n"
       "print(sandbox.isolation())\n"], stdout=subprocess.PIPE, text=True)
            for _ in range(4)]
  assert [p.communicate()[0].strip() for p in probes] == \
      [sandbox.isolation()] * 4


@pytest.mark.slow
@needs_sandbox
def test_a_run_ends_even_if_the_scorer_dies():
  # The scorer is killed (SIGKILL) while its program sleeps: `timeout`
  # still ends the sandbox (wall + 10 s), and the slot's next run empties
  # its leftover group.
  slot = sandbox_host.slot(1, 5)
  uid = sandbox.FIRST_UID + slot
  scorer = subprocess.Popen(
      [sys.executable, "-c", textwrap.dedent(f'''
          from arithmetic_apps import sandbox
          sandbox.run_python("import time\\ntime.sleep(1000)\\n",
                             sandbox.Limits(wall_seconds=1), slot={slot})
          ''')])
  try:
    deadline = time.monotonic() + 60
    while not sandbox_host._uid_processes(uid):
      assert time.monotonic() < deadline, "the program never started"
      time.sleep(0.05)
  finally:
    scorer.kill()
    scorer.wait()
  deadline = time.monotonic() + 60
  while sandbox_host._uid_processes(uid):
    assert time.monotonic() < deadline, "the sandbox outlived its scorer"
    time.sleep(0.2)
  after = run_python("print(6 * 7)", LIMITS, slot=slot)
  assert (after.status, after.output) == ("exited", "42\n")
  Host(slot).assert_unchanged()


def _ending(command, requests=None, pass_fds=()):
  """A `sandbox._Process` around `sh -c command` (run in a session of its
  own, as bwrap's namespace init is), its drain started once the program
  has printed; then `end()` called from a thread. Returns (process, ended:
  [end's result] once it returned within 30 s, else [])."""
  launcher = subprocess.Popen(
      ["sh", "-c", f"setsid sh -c '{command}' & exit 0"],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=pass_fds,
      start_new_session=True)
  process = sandbox._Process.__new__(sandbox._Process)  # pylint: disable=protected-access
  vars(process).update(proc=launcher, limits=LIMITS, output=bytearray(),
                       too_much=threading.Event(), group=None, workdir=None,
                       requests=requests, responses=None)
  process.drain = threading.Thread(target=process._drain, daemon=True)  # pylint: disable=protected-access
  process.drain.start()
  deadline = time.monotonic() + 30
  while not process.output:  # the program is up, in its own session
    assert time.monotonic() < deadline, "the program never started"
    time.sleep(0.01)
  ended = []
  closer = threading.Thread(target=lambda: ended.append(process.end()),
                            daemon=True)
  closer.start()
  closer.join(timeout=30)
  return process, ended


def test_end_returns_when_a_server_outlives_its_launcher():
  # bwrap's namespace init runs in a session of its own: the launcher's
  # process group can die without it (its parent-death signal was once
  # seen not to fire), and a run then hung in `end`, closing the output
  # pipe under the drain still reading it. A serving program that holds
  # the output until its requests pipe closes: `end` returns, with
  # everything it printed.
  req_r, req_w = os.pipe()
  process, ended = _ending(
      f"echo serving; cat /dev/fd/{req_r} >/dev/null; echo ended",
      requests=req_w, pass_fds=(req_r,))
  os.close(req_r)
  assert ended, "end() did not return"
  assert process.text() == "serving\nended\n"
  assert process.proc.stdout.closed and process.requests is None


def test_end_returns_when_a_writer_ignores_every_pipe():
  # A program that reads no requests and outlives the launcher (in the
  # sandbox the slot's group kills it; without groups nothing does): `end`
  # waits for the drain a bounded time, then returns with the output pipe
  # left to the drain instead of blocking on it.
  process, ended = _ending("echo $$; exec sleep 60")
  try:
    assert ended, "end() did not return"
    assert not process.proc.stdout.closed and process.drain.is_alive()
  finally:
    os.kill(int(process.text().split()[0]), signal.SIGKILL)
  process.drain.join(timeout=30)
  assert not process.drain.is_alive()


# --- No silent weak mode -------------------------------------------------


def test_running_without_isolation_needs_the_word_none(tmp_path):
  with pytest.raises(ValueError, match="isolation"):
    run_python("print(1)", isolation="rlimits")
  outcome = run_python("import os\nprint(len(os.environ))\n",
                       LIMITS, slot=SLOT, isolation="none")
  assert (outcome.status, outcome.isolation, outcome.output) == (
      "exited", "none", "4\n")


def test_without_bwrap_the_sandbox_refuses(monkeypatch):
  monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
  sandbox._probe.cache_clear()
  try:
    with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap"):
      run_python("print(1)")
  finally:
    sandbox._probe.cache_clear()


# --- run_checked: plain data both ways -----------------------------------


@needs_sandbox
def test_plain_data_crosses_exactly():
  values = [None, True, 0, -7, 2 ** 100, -(2 ** 70), 0.1, -0.0, math.inf,
            1e-300, "é\x00\ud800", b"\x00\xff", 3 - 4j, [1, [2, (3,)]],
            (1, "a"), {"a": 1, (1, 2): [3], None: {4}}, {1, "x", (2,)},
            frozenset({1}), [], (), {}, set()]
  seen = []

  def check(candidate):
    for v in values:
      got = candidate(v)
      seen.append(got)
      assert got == v and type(got) is type(v)
    assert math.copysign(1, candidate(-0.0)) == -1
    assert math.isnan(candidate(math.nan))
    assert candidate(x=5) == 5

  verdict = run_checked("def f(v=None, x=None):\n    return x if v is None "
                        "and x is not None else v\n", "f", check, LIMITS,
                        slot=SLOT)
  assert (verdict.passed, verdict.status, verdict.calls) == (
      True, "passed", len(values) + 3)
  assert all(a is not b for a, b in zip(seen, values) if isinstance(
      a, (list, dict, set)))  # fresh objects, built here


ANSWERS = {
    # what the function returns -> (status, reason starts with)
    "an object whose __eq__ is always true":
        ("class A:\n    def __eq__(self, o):\n        return True\n"
         "def f(x):\n    return A()\n", "invalid", "returned NotPlain: a A"),
    "an int subclass": ("class I(int):\n    def __eq__(self, o):\n"
                        "        return True\n    __hash__ = int.__hash__\n"
                        "def f(x):\n    return I(1)\n", "invalid",
                        "returned NotPlain: a I"),
    "a list holding itself": ("def f(x):\n    a = []\n    a.append(a)\n"
                              "    return a\n", "invalid", "returned"),
    "a generator": ("def f(x):\n    yield x\n", "invalid", "returned"),
    "an exception": ("def f(x):\n    raise ValueError('no')\n", "raised",
                     "ValueError: no"),
    "SystemExit(0)": ("import sys\ndef f(x):\n    sys.exit(0)\n", "raised",
                      "SystemExit: 0"),
    "a MemoryError": ("def f(x):\n    raise MemoryError\n", "memory",
                      "MemoryError"),
    "os._exit(0)": ("import os\ndef f(x):\n    os._exit(0)\n", "exited",
                    "ended before answering"),
    "a long answer": ("def f(x):\n    return 'x' * (2 << 20)\n", "invalid",
                      "an answer longer than message_bytes"),
    "a syntax error": ("def f(x) return x\n", "raised",
                       "while loading: SyntaxError"),
    "sleeping": ("import time\ndef f(x):\n    time.sleep(100)\n", "timeout",
                 "wall-clock limit"),
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_what_is_not_a_plain_answer_fails(name):
  source, status, reason = ANSWERS[name]
  host = Host(SLOT)

  def check(candidate):
    try:  # even a check that swallows everything cannot make it pass
      assert candidate(1) == 1
    except BaseException:  # noqa: B902
      pass

  verdict = run_checked(source, "f", check, _limits(wall_seconds=1.5),
                        slot=SLOT)
  assert (verdict.passed, verdict.status) == (False, status), verdict
  assert verdict.reason.startswith(reason), verdict.reason
  host.assert_unchanged()


@needs_sandbox
def test_a_failed_check_names_its_assertion():
  verdict = run_checked("def f(x):\n    return x + 1\n", "f",
                        lambda c: _assert_f(c), LIMITS, slot=SLOT)
  assert (verdict.status, verdict.reason, verdict.calls) == (
      "failed", "AssertionError: assert candidate(2) == 4", 2)


def _assert_f(candidate):
  assert candidate(1) == 2
  assert candidate(2) == 4


def test_the_wire_refuses_what_encode_would_not_write():
  for text in ['{"a": 1}', '{"tuple": 1}', '{"int": "xyz"}', '{"bytes": "0"}',
               '{"set": [[1]]}', '{"dict": [[1]]}', "[" * 100 + "]" * 100,
               "1" * 5000, "nope"]:
    with pytest.raises(sandbox_harness.NotPlain):
      sandbox_harness.decode(text)
  deep = []
  for _ in range(100):
    deep = [deep]
  with pytest.raises(sandbox_harness.NotPlain, match="deeper"):
    sandbox_harness.encode(deep)


# --- The pool, arguments --------------------------------------------------


@pytest.mark.slow
@needs_sandbox
def test_pool_runs_two_at_a_time_and_keeps_order():
  # The first program sleeps 10 s, the second none: with two slots the
  # second finishes first (a margin of 10 s against a start-up of about
  # 0.1 s); outcomes still come back in order.
  sources = ["import time\ntime.sleep(10)\nprint(0)\n",
             "import time\ntime.sleep(0.1)\nprint(1)\n", "raise SystemExit(3)\n"]
  finished = []
  limits = _limits(wall_seconds=30)
  outcomes = sandbox.pool_map(lambda s, slot: run_python(s, limits, slot),
                              sources, workers=2, first_slot=SLOT,
                              progress=lambda i, o: finished.append(i))
  assert [(o.status, o.exit_code, o.output) for o in outcomes] == [
      ("exited", 0, "0\n"), ("exited", 0, "1\n"), ("exited", 3, "")]
  assert finished.index(1) < finished.index(0)


def test_bad_arguments():
  with pytest.raises(ValueError, match="wall_seconds"):
    Limits(wall_seconds=0)
  with pytest.raises(TypeError, match="source"):
    run_python(b"print(1)")
  with pytest.raises(TypeError, match="limits"):
    run_python("print(1)", limits={"wall_seconds": 1})
  with pytest.raises(ValueError, match="slot"):
    run_python("print(1)", slot=1000)
  with pytest.raises(ValueError, match="workers"):
    sandbox.pool_map(run_python, ["print(1)"], workers=0)
  with pytest.raises(ValueError, match="entry_point"):
    run_checked("x = 1", "not a name", lambda c: None)
  with pytest.raises(TypeError, match="check"):
    run_checked("x = 1", "f", None)
