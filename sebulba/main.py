"""Command-line entry point: flags -> distributed init -> train.train().

    python -m sebulba.main --config=configs/ppo_cartpole.py --workdir=runs/cartpole
    python -m sebulba.main --config=configs/ppo_atari.py:smoke --workdir=/tmp/x \
        --config.seed=2

A bad config exits with status 2 and one line naming the field.
"""

from __future__ import annotations

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from sebulba.errors import ConfigError

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with an argument: FILE[:ARG].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for metrics, summaries, checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() with auto-detection."
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0 for an explicit multi-process run."
)
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
flags.mark_flags_as_required(["config", "workdir"])


def _initialize_distributed() -> None:
    import jax

    if _COORDINATOR.value is not None:
        jax.distributed.initialize(
            coordinator_address=_COORDINATOR.value,
            num_processes=_NUM_PROCESSES.value,
            process_id=_PROCESS_ID.value,
        )
    elif _DISTRIBUTED.value:
        jax.distributed.initialize()


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    _initialize_distributed()
    from sebulba import train

    try:
        train.train(_CONFIG.value, _WORKDIR.value)
    except ConfigError as error:
        print(f"sebulba: config error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    app.run(main)
