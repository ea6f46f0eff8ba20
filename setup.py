"""Packaging for arithmetic-decoding (import name `arithmetic_decoding`)."""

import setuptools

setuptools.setup(
    name="arithmetic-decoding",
    version="0.1.0",
    description=(
        "Arithmetic sampling for T5X: parallel, diverse, unbiased sampling "
        "from language models as a drop-in for temperature_sample."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=setuptools.find_packages(
        include=["arithmetic_decoding", "arithmetic_decoding.*"]) + [
            "arithmetic_decoding.tpu_configs"],
    # The topology files live at the top of the repository (tpu_configs/);
    # installed, they sit inside the package (topology.py looks in both).
    package_dir={"arithmetic_decoding.tpu_configs": "tpu_configs"},
    package_data={"arithmetic_decoding.tpu_configs": ["*.toml", "other/*.toml"],
                  "arithmetic_decoding": ["assets/*/*"]},
    install_requires=[
        "jax>=0.7",
        "numpy>=1.24",
    ],
    extras_require={
        # T5X is not on PyPI: install it from its repository on machines that
        # run `t5x infer`. The core library never imports it.
        "t5x": ["t5x @ git+https://github.com/google-research/t5x"],
        # The encoder-decoder (arithmetic_decoding.models) and sharded
        # decoding (arithmetic_decoding.sharding) are written in Flax.
        "models": ["flax>=0.10"],
        # Reading and writing T5X checkpoints (models.t5x_checkpoint), local
        # or gs://, without T5X.
        "checkpoints": ["flax>=0.10", "tensorstore>=0.1.60"],
        # The embedded English->French model: tokenizer, BLEU, training.
        "translation": ["flax>=0.10", "sentencepiece>=0.2", "sacrebleu>=2.4",
                        "tqdm>=4.60"],
        "train": ["flax>=0.10", "sentencepiece>=0.2", "sacrebleu>=2.4",
                  "tqdm>=4.60", "optax>=0.2"],
        "experiments": ["flax>=0.10", "sentencepiece>=0.2", "sacrebleu>=2.4",
                        "tqdm>=4.60", "matplotlib>=3.7"],
        "demo": ["tqdm>=4.60", "flax>=0.10", "sentencepiece>=0.2",
                 "sacrebleu>=2.4"],
        "bench": ["tqdm>=4.60", "flax>=0.10"],
        # The real TPU compiler (libtpu, ~700 MB) for the Figure 5 study's
        # ahead-of-time compiles; no TPU needed.
        "tpu": ["jax[tpu]", "tqdm>=4.60", "matplotlib>=3.7"],
        "test": [
            "pytest>=7",
            "hypothesis>=6.80",
            "scipy>=1.10",
            "flax>=0.10",
            "gin-config>=0.5",
            "tqdm>=4.60",
            "sentencepiece>=0.2",
            "sacrebleu>=2.4",
            "optax>=0.2",
            "matplotlib>=3.7",
            "tensorstore>=0.1.60",
        ],
    },
)
