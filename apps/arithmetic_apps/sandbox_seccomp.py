"""The system calls a sandboxed program may not make: a classic BPF
program for bubblewrap's `--seccomp FD`.

Refused, with EPERM:

  add_key, request_key, keyctl   the kernel's keyrings: a uid's user
      keyring outlives its processes (for the life of the user namespace,
      here the host's), so a program could leave data there for the next
      program of its slot
  unshare, clone with CLONE_NEWUSER   a user namespace of its own: the
      program would hold every capability inside it, the widest door into
      the kernel's less travelled code

and clone3 with ENOSYS (its flags sit in memory a filter cannot read;
glibc then falls back to clone, which the filter can check). A call from
another architecture's table (x32 on x86-64, or a foreign audit arch)
kills the process. Everything else is allowed: this is a short deny list,
not a whitelist (see docs/passk.md, threat model).

  >>> program = bpf_program("x86_64")
  >>> len(program) % 8, len(program) // 8
  (0, 20)
  >>> bpf_program("sparc") is None
  True
"""

from __future__ import annotations

import errno
import struct
from typing import Optional

# struct seccomp_data: nr at 0, arch at 4, args[0] (low word on a
# little-endian machine) at 16.
_NR, _ARCH, _ARG0 = 0, 4, 16
_LD_W_ABS = 0x20
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45
_RET = 0x06
_ALLOW = 0x7FFF0000
_KILL = 0x80000000
_ERRNO = 0x00050000
CLONE_NEWUSER = 0x10000000

# audit arch, x32 bit (or None), and the numbers of the filtered calls.
_TABLES = {
    "x86_64": (0xC000003E, 0x40000000,
               dict(add_key=248, request_key=249, keyctl=250, unshare=272,
                    clone=56, clone3=435)),
    "aarch64": (0xC00000B7, None,
                dict(add_key=217, request_key=218, keyctl=219, unshare=97,
                     clone=220, clone3=435)),
}


def _op(code, k, jt=0, jf=0):
  return struct.pack("=HBBI", code, jt, jf, k)


def bpf_program(machine: str) -> Optional[bytes]:
  """The filter for `platform.machine()`, or None where there is no table
  (the sandbox then runs without one, and says so)."""
  if machine not in _TABLES:
    return None
  arch, x32, nr = _TABLES[machine]
  eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
  ops = [_op(_LD_W_ABS, _ARCH), _op(_JEQ, arch, 1, 0), _op(_RET, _KILL),
         _op(_LD_W_ABS, _NR)]
  if x32 is not None:
    ops += [_op(_JGE, x32, 0, 1), _op(_RET, _KILL)]
  denied = [nr["add_key"], nr["request_key"], nr["keyctl"]]
  for number in denied:
    ops += [_op(_JEQ, number, 0, 1), _op(_RET, eperm)]
  ops += [_op(_JEQ, nr["clone3"], 0, 1), _op(_RET, enosys)]
  # unshare and clone: refused when the flags ask for a user namespace.
  ops += [_op(_JEQ, nr["unshare"], 1, 0), _op(_JEQ, nr["clone"], 0, 3),
          _op(_LD_W_ABS, _ARG0), _op(_JSET, CLONE_NEWUSER, 0, 1),
          _op(_RET, eperm), _op(_RET, _ALLOW)]
  return b"".join(ops)
