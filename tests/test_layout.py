"""The two layers: the library never imports the applications, ships no
large files, and needs only jax + numpy for its core."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "arithmetic_decoding"
APPS = ROOT / "apps" / "arithmetic_apps"


def imported_modules(path: pathlib.Path):
  """Every module name an `import` / `from ... import` in `path` names."""
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      yield node.module


def test_the_library_never_imports_the_applications():
  offenders = [(str(path.relative_to(ROOT)), name)
               for path in LIBRARY.rglob("*.py")
               for name in imported_modules(path)
               if name.split(".")[0] == "arithmetic_apps"]
  assert not offenders, offenders


def test_no_application_module_imports_a_program_or_the_demo():
  """Applications import the library and each other's modules, never the
  command-line layer (scripts/) or the demo: no import runs back up."""
  offenders = [(str(path.relative_to(ROOT)), name)
               for path in APPS.rglob("*.py")
               for name in imported_modules(path)
               if name == "arithmetic_apps.demo" or
               name.split(".")[0] in ("scripts", "bench_decode")]
  assert not offenders, offenders


def test_the_library_ships_no_file_over_one_megabyte():
  big = [str(p.relative_to(ROOT)) for p in LIBRARY.rglob("*")
         if p.is_file() and p.stat().st_size > 2**20]
  assert not big, big


def test_the_core_imports_with_jax_and_numpy_alone():
  """`import arithmetic_decoding` and its decode functions work where Flax
  (the `models` extra) is absent."""
  script = ("import sys\n"
            "for name in ('flax', 'tensorstore', 'sentencepiece', "
            "'arithmetic_apps'):\n"
            "  sys.modules[name] = None\n"
            "import arithmetic_decoding as ad\n"
            "from arithmetic_decoding.methods import Method\n"
            "assert ad.arithmetic_sample and Method.of('beam')\n")
  proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                        capture_output=True, text=True, timeout=300,
                        env={"JAX_PLATFORMS": "cpu", "PATH": ""})
  assert proc.returncode == 0, proc.stderr[-3000:]
