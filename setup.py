"""Packaging of the library `arithmetic-decoding` (import `arithmetic_decoding`).

The wheel holds the library only: codes, the categorical step, the decode
request, loop and its schedulers (fused, compacted, mesh), encoding, beam
search, sharding, the models (T5, decoder-only LLMs from GGUF or Hugging
Face folders), LLM sampling and group rollouts. Its required dependencies
are jax and numpy. The applications (the embedded translation model, the
paper's experiments, the Figure 5 study, the demo, pass@k with its
sandbox, the sampling server) are a second package in `apps/` that imports
this one.
"""

import setuptools

setuptools.setup(
    name="arithmetic-decoding",
    version="0.1.0",
    description=(
        "Arithmetic sampling for T5X and JAX language models: parallel, "
        "diverse, unbiased sampling as a drop-in for temperature_sample."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=setuptools.find_packages(
        include=["arithmetic_decoding", "arithmetic_decoding.*"]),
    install_requires=[
        "jax>=0.7",
        "numpy>=1.24",
    ],
    extras_require={
        # T5X is not on PyPI: install it from its repository on machines that
        # run `t5x infer`. The library never imports it.
        "t5x": ["t5x @ git+https://github.com/google-research/t5x"],
        # The encoder-decoder (arithmetic_decoding.models) and sharded
        # decoding (arithmetic_decoding.sharding) are written in Flax.
        "models": ["flax>=0.10"],
        # Reading and writing T5X checkpoints (models.t5x_checkpoint), local
        # or gs://, without T5X.
        "checkpoints": ["flax>=0.10", "tensorstore>=0.1.60"],
        # Decoder-only LLMs from GGUF files or Hugging Face folders
        # (arithmetic_decoding.llm): the GGUF reader and dequantizer, the
        # tokenizer library, the chat template engine (safetensors are read
        # with numpy). No weights: the applications' `llm` extra brings
        # those.
        "llm": ["flax>=0.10", "gguf>=0.10", "tokenizers>=0.19",
                "jinja2>=3.1"],
    },
)
