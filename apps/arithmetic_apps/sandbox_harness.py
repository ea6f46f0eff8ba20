"""The sandbox's inside, and the plain-data wire format both sides speak.

Standard library only: the sandbox runs this file, with nothing of the
project on the path, as

  python -s -S -P -B sandbox_harness.py CONFIG_JSON   < program source

CONFIG_JSON says what to do (`mode`), the resource limits, and, when the
sandbox started it as root, the unprivileged uid/gid to become. In order,
before any of the program's code runs, it reads the program from stdin,
sets the limits (hard, so the program cannot raise them), becomes the
slot's user (no supplementary groups; no capabilities remain), and then:

  "run"    executes the program as `__main__`, like `python prog.py`.
  "serve"  loads it as a module named `solution` (its `if __name__ ==
           "__main__":` block does not run), sends `{"ready": true}` and
           answers calls of its function `entry`: each request is
           `{"call": {"args": [...], "kwargs": {...}}}` and each answer `{"return": value}`,
           `{"raise": "ValueError: ..."}` or `{"refuse": "why"}` (a result
           that is not plain data).

Nothing here is trusted by the other side. The program runs in this
process and can rewrite every line of it, so the harness is only a
convenience for honest programs: whatever a hostile one makes it send, the
parent reads as plain data (`decode`), and whether that data passes is
decided outside, by the test's own code (see `sandbox.run_checked`).

The wire format: a frame is a 4-byte big-endian length and that many
bytes of JSON. Values are Python's plain data, typed exactly (subclasses
are refused) and tagged where JSON is not enough, so that a decoded value
is a fresh object of a builtin type, equal to the original:

  >>> encode((1, [2.5, "x"], {None: b"\\x00"}, {3}))
  '{"tuple": [1, [2.5, "x"], {"dict": [[null, {"bytes": "00"}]]}, {"set": [3]}]}'
  >>> decode(encode((1, [2.5, "x"], {None: b"\\x00"}, {3})))
  (1, [2.5, 'x'], {None: b'\\x00'}, {3})
  >>> decode(encode(2 ** 100)) == 2 ** 100
  True
  >>> class Always(int):
  ...   def __eq__(self, other): return True
  >>> try:
  ...   encode([Always(3)])
  ... except NotPlain as e:
  ...   print(e)
  a Always is not plain data
"""

import json
import os
import resource
import struct
import sys
import types

# Nesting deeper than this is refused (on both sides).
MAX_DEPTH = 64
# Integers beyond this travel as hex strings (JSON numbers turn into
# decimal text, which Python limits to 4,300 digits).
_BIG = 1 << 63
_TAGS = ("tuple", "dict", "set", "frozenset", "bytes", "complex", "int")


class NotPlain(ValueError):
  """A value that is not plain data (or is nested too deep, or cyclic)."""


def to_wire(value, depth=0):
  """Plain data -> a JSON structure (what a frame carries); `NotPlain` for
  anything else (a cycle is refused as too deep)."""
  if depth > MAX_DEPTH:
    raise NotPlain(f"nested deeper than {MAX_DEPTH}")
  kind = type(value)
  if value is None or kind is bool or kind is str or kind is float:
    return value
  if kind is int:
    return value if -_BIG < value < _BIG else {"int": format(value, "x")}
  if kind is list:
    return [to_wire(v, depth + 1) for v in value]
  if kind is tuple:
    return {"tuple": [to_wire(v, depth + 1) for v in value]}
  if kind is dict:
    return {"dict": [[to_wire(k, depth + 1), to_wire(v, depth + 1)]
                     for k, v in value.items()]}
  if kind is set or kind is frozenset:
    return {kind.__name__: [to_wire(v, depth + 1) for v in value]}
  if kind is bytes:
    return {"bytes": value.hex()}
  if kind is complex:
    return {"complex": [value.real, value.imag]}
  raise NotPlain(f"a {kind.__name__} is not plain data")


def encode(value) -> str:
  """Plain data -> JSON text (`to_wire`, dumped)."""
  return json.dumps(to_wire(value))


def from_wire(item, depth=0):
  """A JSON structure -> fresh plain data; `NotPlain` for anything
  `to_wire` would not have made."""
  if depth > MAX_DEPTH:
    raise NotPlain(f"nested deeper than {MAX_DEPTH}")
  kind = type(item)
  if item is None or kind in (bool, int, float, str):
    return item
  if kind is list:
    return [from_wire(v, depth + 1) for v in item]
  if kind is not dict or len(item) != 1:
    raise NotPlain("not a tagged value")
  (tag, body), = item.items()
  try:
    if tag == "int" and type(body) is str:
      return int(body, 16)
    if tag == "bytes" and type(body) is str:
      return bytes.fromhex(body)
    if tag == "complex" and type(body) is list and len(body) == 2 and all(
        type(x) in (int, float) for x in body):
      return complex(*body)
    if tag not in _TAGS or type(body) is not list:
      raise NotPlain(f"unknown tag {tag!r}")
    items = [from_wire(v, depth + 1) for v in body]
    if tag == "tuple":
      return tuple(items)
    if tag == "set":
      return set(items)
    if tag == "frozenset":
      return frozenset(items)
    if any(type(p) is not list or len(p) != 2 for p in items):
      raise NotPlain("a dict is a list of [key, value] pairs")
    return dict(items)
  except NotPlain:
    raise
  except (TypeError, ValueError, OverflowError) as e:  # unhashable, bad hex
    raise NotPlain(f"bad {tag}: {e}") from None


def decode(text):
  """JSON text -> fresh plain data (`from_wire` of the parsed text)."""
  try:
    return from_wire(json.loads(text))
  except (ValueError, RecursionError, MemoryError) as e:
    if isinstance(e, NotPlain):
      raise
    raise NotPlain(f"not plain-data JSON: {type(e).__name__}") from None


def frame(message) -> bytes:
  """A message (a dict of JSON structures) as bytes: length, then JSON."""
  data = json.dumps(message).encode("utf-8")
  return struct.pack(">I", len(data)) + data


def _read_exactly(fd, n):
  chunks = []
  while n:
    chunk = os.read(fd, min(n, 1 << 20))
    if not chunk:
      return None
    chunks.append(chunk)
    n -= len(chunk)
  return b"".join(chunks)


def _write_all(fd, data):
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]


def _describe(error):
  """'ValueError: message' (a hostile __str__ cannot stop the report)."""
  try:
    text = str(error)
  except BaseException:  # noqa: B902 - any failure of a hostile __str__
    text = ""
  name = type(error).__name__
  return f"{name}: {text}"[:300] if text else name


def _set_limits(limits):
  """Hard and soft limits: lowering needs no privilege, raising them again
  needs CAP_SYS_RESOURCE in the host's user namespace, which the program
  never has. RLIMIT_CPU: SIGXCPU at the limit, SIGKILL a second later."""
  for name, value in limits.items():
    which = getattr(resource, name)
    hard = value + 1 if name == "RLIMIT_CPU" else value
    resource.setrlimit(which, (value, hard))


def _become(uid, gid):
  """Root (inside the sandbox, with only CAP_SETUID and CAP_SETGID) becomes
  the slot's user: every capability goes with the uid."""
  os.setgroups([])
  os.setresgid(gid, gid, gid)
  os.setresuid(uid, uid, uid)
  if os.getresuid() != (uid, uid, uid) or os.getgroups():
    raise SystemExit("sandbox: could not drop privileges")


def _serve(source, entry, requests, responses):
  module = types.ModuleType("solution")
  sys.modules["solution"] = module
  try:
    code = compile(source, "<solution>", "exec", dont_inherit=True)
    exec(code, module.__dict__)  # noqa: S102 - this is the sandbox
  except BaseException as e:  # noqa: B902 - an exit while loading fails too
    _write_all(responses, frame({"raise": _describe(e), "loading": True}))
    return
  _write_all(responses, frame({"ready": True}))
  while True:
    head = _read_exactly(requests, 4)
    if head is None:
      return
    body = _read_exactly(requests, struct.unpack(">I", head)[0])
    if body is None:
      return
    call = json.loads(body)["call"]
    args, kwargs = from_wire(call["args"]), from_wire(call["kwargs"])
    try:
      result = module.__dict__[entry](*args, **kwargs)
    except BaseException as e:  # noqa: B902 - SystemExit is a failure too
      message = {"raise": _describe(e)}
    else:
      try:
        message = {"return": to_wire(result)}
      except (NotPlain, RecursionError) as e:
        message = {"refuse": _describe(e)}
    _write_all(responses, frame(message))


def main():
  config = json.loads(sys.argv[1])
  source = sys.stdin.buffer.read(config["max_source_bytes"] + 1)
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.close(null)
  if len(source) > config["max_source_bytes"]:
    raise SystemExit("sandbox: program too long")
  _set_limits(config["limits"])
  if config.get("uid") is not None:
    _become(config["uid"], config["gid"])
  mode = config["mode"]
  if mode == "serve":
    _serve(source, config["entry"], config["requests_fd"],
           config["responses_fd"])
    return
  main_module = types.ModuleType("__main__")
  sys.modules["__main__"] = main_module
  code = compile(source, "<program>", "exec", dont_inherit=True)
  exec(code, main_module.__dict__)  # noqa: S102 - this is the sandbox


if __name__ == "__main__":
  main()
