"""The sandbox contains hostile programs, scores them as failures with their
reason, leaves the host as it was, and the next program runs.

Each hostile case runs in the mode this machine allows (`isolation()`:
"namespaces" as root with `unshare`, as here and in CI); the host checks
after each one are real: the sentinel file outside the sandbox still has its
content, nothing new appeared beside it, a listener on the host's loopback
received no connection, no process of the sandbox's uids is left, and this
test process is alive.
"""

import os
import socket
import subprocess
import time

import pytest

from arithmetic_apps import sandbox
from arithmetic_apps.sandbox import Limits, run_all, run_python

LIMITS = Limits(wall_seconds=6, cpu_seconds=2, memory_bytes=512 << 20,
                processes=16, output_bytes=4096)


# pytest-xdist workers run tests at once: each takes its own sandbox slots
# (uids), as `run_all`'s workers do.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
SLOT = 10 + 2 * WORKER


def _sandbox_processes(slot=SLOT):
  """Processes owned by the slot's uid, left on the host."""
  out = subprocess.run(["ps", "-eo", "uid="], capture_output=True, text=True,
                       check=True).stdout.split()
  return [u for u in out if int(u) == sandbox.FIRST_UID + slot]


@pytest.fixture()
def sentinel(tmp_path_factory):
  """A world-writable folder outside /tmp (under the tests' folder) with a
  file in it: the program must neither change, delete nor add."""
  folder = os.path.join(os.path.dirname(__file__), f".sandbox-probe-{os.getpid()}")
  os.makedirs(folder, exist_ok=True)
  os.chmod(folder, 0o777)
  path = os.path.join(folder, "keep.txt")
  with open(path, "w") as f:
    f.write("host data")
  yield folder, path
  for name in os.listdir(folder):
    os.remove(os.path.join(folder, name))
  os.rmdir(folder)


HOSTILE = {
    "infinite loop": ("while True:\n    pass\n", {"cpu", "timeout"}),
    "sleep forever": ("import time\ntime.sleep(1000)\n", {"timeout"}),
    "fork bomb": ("import os, time\n"
                  "for _ in range(10000):\n"
                  "    try:\n        os.fork()\n"
                  "    except Exception:\n        pass\n"
                  "time.sleep(1000)\n", {"timeout"}),
    "10 GB allocation": ("x = bytearray(10 * 2**30)\n", {"memory"}),
    "write outside": ("open({folder!r} + '/new.txt', 'w').write('x')\n",
                      {"failed"}),
    "delete outside": ("import os\nos.remove({path!r})\n", {"failed"}),
    "overwrite outside": ("open({path!r}, 'w').write('gone')\n", {"failed"}),
    "open a socket": ("import socket\n"
                      "socket.create_connection(('127.0.0.1', {port}), 2)\n",
                      {"failed"}),
    "kill its parent": ("import os, signal\n"
                        "os.kill(os.getppid(), signal.SIGKILL)\n"
                        "os.kill(-1, signal.SIGKILL)\n", {"failed", "killed"}),
    "print megabytes": ("import sys\n"
                        "for _ in range(100):\n"
                        "    sys.stdout.write('x' * 100000)\n", {"output"}),
}


MODES = [pytest.param("namespaces", marks=pytest.mark.skipif(
    sandbox.isolation() != "namespaces",
    reason="needs root and unshare (namespaces mode)")), "rlimits"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(name, mode, sentinel):
  folder, path = sentinel
  listener = socket.socket()
  listener.bind(("127.0.0.1", 0))
  listener.listen(1)
  listener.settimeout(0.2)
  port = listener.getsockname()[1]
  source, statuses = HOSTILE[name]
  outcome = run_python(source.format(folder=folder, path=path, port=port),
                       LIMITS, slot=SLOT, mode=mode)
  assert outcome.isolation == mode
  assert not outcome.passed
  assert outcome.status in statuses, outcome
  assert outcome.reason
  assert outcome.seconds < LIMITS.wall_seconds + 5
  # The host as it was.
  with open(path) as f:
    assert f.read() == "host data"
  assert os.listdir(folder) == ["keep.txt"]
  with pytest.raises(socket.timeout):
    listener.accept()
  listener.close()
  for _ in range(50):  # the kernel reaps a killed namespace asynchronously
    if not _sandbox_processes():
      break
    time.sleep(0.1)
  assert _sandbox_processes() == []
  # The next program runs.
  after = run_python("print(6 * 7)", LIMITS, slot=SLOT, mode=mode)
  assert (after.passed, after.output) == (True, "42\n")


def test_reasons_name_what_failed():
  failed = run_python("def f(x):\n    return x + 1\nassert f(1) == 3, 'f(1)'\n",
                      LIMITS, slot=SLOT)
  assert (failed.status, failed.reason) == ("failed",
                                            "AssertionError: f(1)")
  ok = run_python("import math\nprint(math.comb(5, 2))\n", LIMITS, slot=SLOT)
  assert (ok.passed, ok.status, ok.output) == (True, "passed", "10\n")


@pytest.mark.skipif(sandbox.isolation() != "namespaces",
                    reason="needs root and unshare (namespaces mode)")
def test_namespaces_mode_isolates_user_files_and_network():
  probe = run_python(
      "import os, socket\n"
      "print(os.getuid(), os.getgid(), os.getgroups(), os.getcwd())\n"
      "print(sorted(os.environ))\n"
      "print(sorted(n for n in os.listdir('/proc') if n.isdigit()))\n"
      "print([l.split()[0] for l in open('/proc/net/dev').readlines()[2:]])\n",
      LIMITS, slot=SLOT)
  uid_line, env_line, pids_line, net_line = probe.output.splitlines()
  uid = sandbox.FIRST_UID + SLOT
  assert uid_line == f"{uid} {uid} [] /tmp/work"
  assert env_line == ("['HOME', 'LANG', 'LD_LIBRARY_PATH', 'PATH', "
                      "'PYTHONHASHSEED']")
  assert pids_line == "['1', '2']"  # the sandbox's process 1 and the program
  assert net_line == "['lo:']"  # a new network namespace: loopback only


def test_pool_runs_two_at_a_time_and_keeps_order():
  # Each program prints when it ran; a 1 s sleep makes runs overlap when
  # (and only when) two run at once.
  program = ("import time\nstart = time.time()\ntime.sleep(1)\n"
             "print({i}, start, time.time())\n")
  sources = [program.format(i=i) for i in range(4)]
  sources.insert(2, "raise SystemExit(3)\n")
  seen = []
  outcomes = run_all(sources, LIMITS, workers=2,
                     progress=lambda i, o: seen.append(i), first_slot=SLOT)
  assert [o.status for o in outcomes] == ["passed"] * 2 + ["failed"] + \
      ["passed"] * 2
  runs = [tuple(map(float, o.output.split())) for o in outcomes if o.passed]
  assert [int(r[0]) for r in runs] == [0, 1, 2, 3]
  assert sorted(seen) == [0, 1, 2, 3, 4]
  overlaps = [max(0.0, min(a[2], b[2]) - max(a[1], b[1]))
              for i, a in enumerate(runs) for b in runs[i + 1:]]
  at_once = [sum(r[1] <= t < r[2] for r in runs)
             for t in [r[1] + 0.5 for r in runs]]
  assert max(at_once) == 2 and sum(o > 0.5 for o in overlaps) >= 2


def test_bad_arguments():
  with pytest.raises(ValueError, match="wall_seconds"):
    Limits(wall_seconds=0)
  with pytest.raises(TypeError, match="source"):
    run_python(b"print(1)")
  with pytest.raises(ValueError, match="workers"):
    run_all(["print(1)"], workers=0)
  with pytest.raises(ValueError, match="mode"):
    run_python("print(1)", mode="docker")
