"""Where the serving-framework presets lie and which versions are shipped, from file names alone.

Kept apart from simroute.calib.engines (the presets' pydantic schema) so that what only lists or finds a preset
(`simroute run --help`'s engine listing, the `--engine` check) loads no schema: importing pydantic and building
its models is about 0.1 s of CPU (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from simroute.errors import UnknownNameError

FRAMEWORKS = ("sglang", "vllm", "trtllm")


def engines_dir() -> Path:
    """The shipped presets (calib/engines/ of the shipped profiles)."""
    from simroute.shipped import shipped_folder
    return shipped_folder("calib") / "engines"


def version_key(version: str) -> tuple:
    """Release order: 0.5.9 < 0.5.14, 1.3.0rc20 < 1.3.0 (a release candidate before its release)."""
    match = re.fullmatch(r"([0-9.]+?)(?:rc([0-9]+))?(?:\.?post([0-9]+))?", version)
    if match is None:
        return ((), 0, 0, version)
    release = tuple(int(part) for part in match.group(1).strip(".").split(".") if part)
    candidate = int(match.group(2)) if match.group(2) else 10 ** 9
    return (release, candidate, int(match.group(3) or 0), version)


def preset_versions(framework: str, directory: Path | None = None) -> list[str]:
    """The shipped versions of `framework`'s preset, oldest first (file names only: no YAML read)."""
    folder = directory or engines_dir()
    prefix = f"{framework}-"
    found = [path.stem[len(prefix):] for path in folder.glob(f"{prefix}*.yaml")]
    return sorted(found, key=version_key)


def preset_path(framework: str, version: str | None = None, directory: Path | None = None) -> Path:
    """The file of `framework`'s preset at `version` (the newest shipped when None)."""
    versions = preset_versions(framework, directory)
    if not versions:
        raise UnknownNameError("engine", framework, list(FRAMEWORKS))
    if version is None:
        version = versions[-1]
    if version not in versions:
        raise UnknownNameError(f"{framework} preset version", version, versions)
    return (directory or engines_dir()) / f"{framework}-{version}.yaml"
