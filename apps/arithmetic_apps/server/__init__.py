"""An OpenAI-compatible sampling server on the engine's compacted scheduler.

  python -m arithmetic_apps.server [--model smollm2-135m | FILE.gguf |
      HF_FOLDER] [--host 127.0.0.1] [--port 8000] [--api-key KEY] ...

Modules: `schema` (the API's bodies as pydantic models, with this server's
extensions), `batcher` (continuous batching: one thread, bounded queue,
limits), `app` (the FastAPI routes), `__main__` (the command, loading a
model and serving it with uvicorn; SIGTERM drains). See docs/serving.md.
"""
