"""The sandbox's inside: runs as root in fresh namespaces, then becomes the
unprivileged program (see `sandbox`). Standard library only; started as

  unshare --net --mount --pid --fork --kill-child \\
      python -I -S sandbox_child.py CONFIG_JSON   < program source

In its own mount namespace it makes every existing mount read-only, puts a
size-limited tmpfs on /tmp, /var/tmp and /dev/shm (the working directory is
/tmp/work, so nothing the program writes survives it), binds the Python
installation read-only at /tmp/.python, then drops to the slot's uid/gid
(no supplementary groups, no new privileges), sets the resource limits and
executes the program with a scrubbed environment, as its child: it stays
process 1 (root, out of the program's reach) and exits with the program's
status, or 128 + the signal that killed it. The network namespace has
only a loopback interface, down: no address is reachable. As process 1 of
its PID namespace, when the program ends every process it started is killed
by the kernel.
"""

import ctypes
import json
import os
import resource
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None):
  enc = lambda s: None if s is None else s.encode()
  if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
    err = ctypes.get_errno()
    raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mount_points():
  with open("/proc/self/mounts", encoding="utf-8") as f:
    points = [line.split()[1].encode().decode("unicode_escape")
              for line in f]
  return sorted(set(points), key=len)


def main():
  config = json.loads(sys.argv[1])
  source = sys.stdin.buffer.read(config["max_source_bytes"] + 1)
  if len(source) > config["max_source_bytes"]:
    sys.stderr.write("sandbox: program too long\n")
    os._exit(3)
  # Everything that exists becomes read-only (in this namespace only).
  for point in _mount_points():
    try:
      _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    except OSError:
      pass  # e.g. a mount that cannot be remounted; still not ours to write
  size = f"size={config['tmpfs_bytes']},mode=1777"
  for point in ("/tmp", "/var/tmp", "/dev/shm"):
    if os.path.isdir(point):
      _mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, size)
  prefix = config["python_prefix"]
  os.mkdir("/tmp/.python", 0o755)
  _mount(prefix, "/tmp/.python", None, MS_BIND | MS_REC)
  _mount(None, "/tmp/.python", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
  uid, gid = config["uid"], config["gid"]
  os.mkdir("/tmp/work", 0o700)
  os.chown("/tmp/work", uid, gid)
  with open("/tmp/.program.py", "wb") as f:
    f.write(source)
  os.chmod("/tmp/.program.py", 0o444)
  os.chdir("/tmp/work")
  # This process stays root as the namespace's process 1 and waits; the
  # program runs as its child, unprivileged (it cannot signal process 1).
  # The exit status is the program's, or 128 + the signal that killed it.
  child = os.fork()
  if child:
    _, status = os.waitpid(child, 0)
    code = (128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else
            os.WEXITSTATUS(status))
    os._exit(code)

  os.setgroups([])
  os.setgid(gid)
  os.setuid(uid)
  if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    os._exit(4)
  limits = {
      resource.RLIMIT_AS: config["memory_bytes"],
      resource.RLIMIT_CPU: config["cpu_seconds"],
      resource.RLIMIT_NPROC: config["processes"],
      resource.RLIMIT_FSIZE: config["file_bytes"],
      resource.RLIMIT_NOFILE: 64,
      resource.RLIMIT_CORE: 0,
  }
  for which, value in limits.items():
    # CPU: SIGXCPU at the limit (the parent reports "cpu"), SIGKILL 1 s on.
    hard = value + 1 if which == resource.RLIMIT_CPU else value
    resource.setrlimit(which, (value, hard))
  python = f"/tmp/.python/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
  env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp/work", "LANG": "C.UTF-8",
         "LD_LIBRARY_PATH": "/tmp/.python/lib", "PYTHONHASHSEED": "0"}
  os.execve(python, [python, "-I", "-S", "-B", "/tmp/.program.py"], env)


if __name__ == "__main__":
  main()
