"""Modules imported on first use, so that a run's start-up does not wait for them.

`defer_import(name)` puts a stand-in for `name` in `sys.modules`: an `import name` that
follows binds the stand-in at no cost, and the first attribute asked of it imports the
real module (which then replaces it in `sys.modules`). sebulba defers what its critical
path to the first update does not need: orbax until a checkpoint is looked for (the
update compiles meanwhile, docs/architecture.md "Start-up"), and the plotting modules
that JAX env suites import only to render.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


class _DeferredModule(ModuleType):
    """Stands in `sys.modules` for a module until an attribute of it is first asked for.

    Then it imports the real module and answers from it; names bound to the stand-in by
    earlier imports keep working through it.
    """

    def __init__(self, name: str, spec):
        super().__init__(name)
        # The import system reads `__spec__` of modules it finds in `sys.modules`; set, it
        # does not need the real module.
        self.__spec__ = spec

    def __getattr__(self, attribute: str):
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attribute)


def defer_import(name: str) -> ModuleType | None:
    """Lets `import name` cost nothing until the module is used; returns what `sys.modules`
    then holds for it (the stand-in, or the module already imported), None if it is not
    installed."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:  # A parent package that is not installed.
        return None
    if spec is None:
        return None
    module = _DeferredModule(name, spec)
    sys.modules[name] = module
    return module
