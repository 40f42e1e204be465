"""Calibration profiles: schema, provenance, loading and composing, writing.

The names below load with their module on first use (PEP 562): `simroute predict` reads a shipped profile's
constants from `calib.validated` without importing the YAML and pydantic machinery of `calib.profile`.
"""

from __future__ import annotations

from simroute.lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "simroute.calib.profile": ("Profile", "default_profile_path", "flatten", "load_profile", "resolve_profile_path",
                               "shipped_dir", "write_profile", "REQUIRED_CONSTANTS"),
    "simroute.calib.schema": ("SCHEMA_VERSION", "Constant", "FabricSpec", "Provenance", "ProfileFile"),
    "simroute.calib.serving": ("SERVING_TABLE", "ServingRow", "load_serving_table"),
})
