"""Packages whose public names load with their module on first use (PEP 562), so that a light command
(`simroute predict`) imports only the modules it uses, not every module its package re-exports."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def exports(package: str, homes: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any], Callable[[], list[str]],
                                                                        list[str]]:
    """(`__getattr__`, `__dir__`, `__all__`) for `package`, whose names live in the modules `homes` maps to
    them; a name is imported on first use and kept in the package's namespace."""
    module_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(module_of))

    return __getattr__, __dir__, list(module_of)
