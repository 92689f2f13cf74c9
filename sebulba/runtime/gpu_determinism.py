"""Same seed, same result on GPUs: XLA's deterministic GPU execution, chosen before JAX starts.

XLA:GPU differs from run to run in two ways that XLA:CPU does not:

* kernels that accumulate with atomics (scatter, some GEMM and convolution algorithms)
  add in an order that varies between executions;
* autotuning times candidate kernels while compiling and keeps the fastest, so two
  compilations of one program may choose kernels that round differently.

`--xla_gpu_deterministic_ops=true` removes both: XLA switches to deterministic kernels
(it refuses to compile an operation that has none) and keeps timing out of its kernel
choices. On one H100
the same IMPALA Atari run twice gave two `params_checksum`s without the flag and one
with it (docs/architecture.md, "Determinism on GPUs").

XLA reads `XLA_FLAGS` once, when JAX starts its first backend, so `configure` runs before
anything asks JAX for devices: `python -m sebulba.main` calls it before
`jax.distributed.initialize`, and `train.train` again for library users. The flag names
a debug option of every XLA build, so setting it is harmless on CPU and TPU; it is set
whatever the backend, which keeps the decision free of a device query that would start
the backend too early. `debug.deterministic_gpu=False` trades it for speed: on one H200
PPO Atari's learner update ran 1.42x faster without it (2.56x before the ResNet's max-pool
took its scatter-free gradient under deterministic kernels; docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sebulba.errors import ConfigError

DETERMINISTIC_GPU_FLAGS = ("--xla_gpu_deterministic_ops=true",)


def _flag_values(xla_flags: str) -> dict[str, str]:
    """`--name=value` (or `--name`, meaning true) entries of an XLA_FLAGS string by name."""
    values = {}
    for entry in xla_flags.split():
        name, _, value = entry.removeprefix("--").partition("=")
        values[name] = value or "true"
    return values


def xla_flags_for(deterministic: bool, xla_flags: str) -> str:
    """`xla_flags` with the deterministic GPU flags added when `deterministic` is True.

    Flags already present are kept, so a user's own XLA_FLAGS (a device count, a dump
    directory) survive; with `deterministic` False the string is returned unchanged.

    Raises:
      ConfigError: `deterministic` is True but `xla_flags` turns one of the flags off.
    """
    if not deterministic:
        return xla_flags
    present = _flag_values(xla_flags)
    added = []
    for flag in DETERMINISTIC_GPU_FLAGS:
        name, _, value = flag.removeprefix("--").partition("=")
        if name not in present:
            added.append(flag)
        elif present[name].lower() not in (value, "1"):
            raise ConfigError(
                f"debug.deterministic_gpu is True but XLA_FLAGS sets --{name}={present[name]}; "
                "remove it from XLA_FLAGS or set --config.debug.deterministic_gpu=False"
            )
    return " ".join([xla_flags, *added]).strip()


def backend_started() -> bool:
    """Whether JAX has started a backend in this process (XLA_FLAGS are then read)."""
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(xla_bridge, "_backends", None))


def configure(deterministic: bool) -> None:
    """Sets this process's XLA_FLAGS for `debug.deterministic_gpu` before JAX starts.

    Raises:
      ConfigError: the flags are wanted, JAX's GPU backend has started without them and
        can no longer take them.
    """
    current = os.environ.get("XLA_FLAGS", "")
    wanted = xla_flags_for(deterministic, current)
    if wanted == current:
        return
    if backend_started():
        import jax

        if jax.default_backend() == "gpu":
            raise ConfigError(
                "debug.deterministic_gpu is True but JAX started its GPU backend before "
                f"sebulba could add {' '.join(DETERMINISTIC_GPU_FLAGS)} to XLA_FLAGS; call "
                "sebulba.runtime.gpu_determinism.configure(True) before the first JAX computation, "
                "export XLA_FLAGS with it, or set --config.debug.deterministic_gpu=False"
            )
        return  # CPU and TPU backends have no use for the flags.
    os.environ["XLA_FLAGS"] = wanted


# The XLA flags under which XLA:GPU runs only deterministic kernels: the one `configure`
# sets, and the narrower one that leaves the autotuner's timing in (docs/benchmarks.md).
_DETERMINISTIC_KERNEL_FLAGS = ("xla_gpu_deterministic_ops", "xla_gpu_exclude_nondeterministic_ops")


def deterministic_kernels() -> bool:
    """Whether this process's XLA_FLAGS restrict XLA:GPU to deterministic kernels, as
    `configure(True)` sets them or a user exported them (read as XLA reads them when JAX
    starts; meaningless on CPUs and TPUs, which have no other kernels)."""
    in_effect = _flag_values(os.environ.get("XLA_FLAGS", ""))
    return any(
        in_effect.get(name, "").lower() in ("true", "1") for name in _DETERMINISTIC_KERNEL_FLAGS
    )


def describe(deterministic: bool) -> dict[str, Any]:
    """What `summary.json` records: the request and the flags XLA was started with."""
    in_effect = _flag_values(os.environ.get("XLA_FLAGS", ""))
    flags = {
        name: in_effect[name]
        for name in (f.removeprefix("--").partition("=")[0] for f in DETERMINISTIC_GPU_FLAGS)
        if name in in_effect
    }
    return {"requested": bool(deterministic), "xla_flags": flags}
