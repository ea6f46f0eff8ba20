"""Serve one model: python -m arithmetic_apps.server --help.

The model is a registered name (`arithmetic_apps.llms`), a GGUF file or a
Hugging Face model folder. The server binds to loopback unless --host says
otherwise. SIGTERM (or Ctrl-C) stops admitting requests (503), lets those
in flight finish for --shutdown-seconds, answers the rest with 503, then
exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from arithmetic_apps.server.batcher import Limits


def parse(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model", default="smollm2-135m",
                 help="a registered model, a .gguf file or a HF folder")
  p.add_argument("--served-name", default=None,
                 help="the model id clients ask for (default: --model's "
                 "name)")
  p.add_argument("--host", default="127.0.0.1")
  p.add_argument("--port", type=int, default=8000)
  p.add_argument("--api-key", default=os.environ.get("ARITHMETIC_API_KEY"),
                 help="required as a bearer token (default: the "
                 "ARITHMETIC_API_KEY environment variable; none: open)")
  p.add_argument("--dtype", default="float32",
                 choices=["float32", "bfloat16"])
  defaults = Limits()
  for field in ("max_rows", "max_queue", "max_n", "max_tokens",
                "max_prompts", "max_per_client", "max_body_bytes"):
    p.add_argument("--" + field.replace("_", "-"), type=int,
                   default=getattr(defaults, field))
  p.add_argument("--shutdown-seconds", type=float,
                 default=defaults.shutdown_seconds)
  return p.parse_args(argv)


def load(model: str, dtype: str):
  """(LLM, default served name) of a registered name, file or folder."""
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.llm import LLM  # pylint: disable=g-import-not-at-top
  if model in llms.MODELS:
    return llms.load(model, dtype), model
  if not os.path.exists(model):
    raise SystemExit(f"--model: {model!r} is neither a registered model "
                     f"({sorted(llms.MODELS)}) nor a file or folder")
  return LLM.load(model, dtype), os.path.basename(os.path.normpath(model))


def main(argv=None) -> int:
  args = parse(argv)
  import uvicorn  # pylint: disable=g-import-not-at-top
  from arithmetic_apps.server.app import create_app  # pylint: disable=g-import-not-at-top
  try:
    limits = Limits(**{k: getattr(args, k) for k in (
        "max_rows", "max_queue", "max_n", "max_tokens", "max_prompts",
        "max_per_client", "max_body_bytes", "shutdown_seconds")})
  except ValueError as e:
    raise SystemExit(str(e)) from e
  llm, name = load(args.model, args.dtype)
  app = create_app(llm, args.served_name or name, limits, args.api_key)
  batcher = app.state.batcher
  server = uvicorn.Server(uvicorn.Config(
      app, host=args.host, port=args.port, log_level="warning",
      timeout_graceful_shutdown=int(args.shutdown_seconds) + 5))
  exit_now = server.handle_exit

  def drain_then_exit(sig, frame):
    # Stop admitting, give jobs in flight their deadline, then let uvicorn
    # close (it waits for the handlers, which have all been answered).
    batcher.drain(args.shutdown_seconds)

    def wait():
      deadline = time.monotonic() + args.shutdown_seconds + 2
      while not batcher.idle() and time.monotonic() < deadline:
        time.sleep(0.05)
      exit_now(sig, frame)

    threading.Thread(target=wait, daemon=True).start()

  server.handle_exit = drain_then_exit
  print(f"serving {llm.name} as {args.served_name or name!r} on "
        f"http://{args.host}:{args.port}/v1 "
        f"({'API key required' if args.api_key else 'no API key'})",
        flush=True)
  server.run()
  batcher.stop()
  return 0


if __name__ == "__main__":
  sys.exit(main())
