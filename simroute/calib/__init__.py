"""Calibration profiles: schema, provenance, loading and composing, writing."""

from simroute.calib.profile import (Profile, default_profile_path, flatten, load_profile, resolve_profile_path,
                                    shipped_dir, write_profile, REQUIRED_CONSTANTS)
from simroute.calib.schema import SCHEMA_VERSION, Constant, FabricSpec, Provenance, ProfileFile

__all__ = ["Profile", "default_profile_path", "flatten", "load_profile", "resolve_profile_path", "shipped_dir",
           "write_profile", "REQUIRED_CONSTANTS", "SCHEMA_VERSION", "Constant", "FabricSpec", "Provenance",
           "ProfileFile"]
