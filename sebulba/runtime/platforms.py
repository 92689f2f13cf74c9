"""Which JAX platforms a process starts, decided before JAX does.

The test extra installs libtpu (for `sebulba.check`'s TPU compilations), and with libtpu
installed JAX tries a TPU backend on every machine, where libtpu prints five lines of
errors about the TPU VM it cannot find. On a machine with no accelerator at all (no
TPU on the PCI bus, no NVIDIA or AMD GPU device node) only the CPU backend can start, so
`skip_absent_accelerators` asks JAX for it alone and the errors never appear. Wherever an
accelerator may be present, or the user chose `JAX_PLATFORMS` (or `jax_platforms` in
code), nothing changes. `import sebulba` calls it, so that library callers are as quiet as
the command lines.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

_GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips sit on the PCI bus under Google's vendor id.
_GPU_DEVICE_NODES = ("/dev/nvidia*", "/dev/kfd", "/dev/dxg")


def _tpu_on_pci_bus() -> bool:
    for vendor_path in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor_path, encoding="ascii") as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def only_cpu_present() -> bool:
    """Whether this machine has neither a TPU nor a GPU device for JAX to start."""
    gpu_nodes = any(glob.glob(pattern) for pattern in _GPU_DEVICE_NODES)
    return not gpu_nodes and not _tpu_on_pci_bus()


def skip_absent_accelerators() -> None:
    """Sets `JAX_PLATFORMS=cpu` where libtpu is installed but no accelerator exists.

    Call before JAX starts a backend; does nothing once `JAX_PLATFORMS` is set, or
    `jax_platforms` in code.
    """
    if "JAX_PLATFORMS" in os.environ or importlib.util.find_spec("libtpu") is None:
        return
    jax = sys.modules.get("jax")
    if jax is not None and jax.config.jax_platforms:  # The caller chose in code.
        return
    if only_cpu_present():
        os.environ["JAX_PLATFORMS"] = "cpu"
        if jax is not None:  # Imported already: its config read the variable then.
            jax.config.update("jax_platforms", "cpu")
