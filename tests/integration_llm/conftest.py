"""Integration tests of the real LLMs against an independent runtime.

The independent runtime is Hugging Face `transformers` (its own GGUF
loader, tokenizer conversion and PyTorch model code) on the CPU build of
PyTorch. They run in `make test-llm`, which installs it and sets
REQUIRE_LLM_RUNTIME=1: there a missing runtime or model file is an error,
never a silent pass. Elsewhere each module skips itself with the reason.
"""

import importlib.util
import os

import pytest

if os.environ.get("REQUIRE_LLM_RUNTIME") == "1":
  missing = [m for m in ("torch", "transformers", "accelerate", "gguf")
             if importlib.util.find_spec(m) is None]
  if missing:
    raise pytest.UsageError(f"REQUIRE_LLM_RUNTIME=1 but {missing} are not "
                            "installed; run `make test-llm`.")

collect_ignore = ["runtime.py"]
