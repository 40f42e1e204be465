"""Calibration profiles: schema, provenance, loading and composing, writing.

The names below load with their module on first use (PEP 562): `simroute predict` reads a shipped profile's
constants from `calib.validated` without importing the YAML and pydantic machinery of `calib.profile`.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "simroute.calib.profile": ("Profile", "default_profile_path", "flatten", "load_profile", "resolve_profile_path",
                               "shipped_dir", "write_profile", "REQUIRED_CONSTANTS"),
    "simroute.calib.schema": ("SCHEMA_VERSION", "Constant", "FabricSpec", "Provenance", "ProfileFile"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'simroute.calib' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
