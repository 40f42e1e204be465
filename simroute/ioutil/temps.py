"""Temporary names beside an output: made, recognised as a killed writer's debris, removed; and the folders a
failed write made, removed again. Every writer in the package starts here."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from simroute.errors import ConfigurationError


_TEMP_NAME = re.compile(r"\.simroute-\d+-[^./]*\.tmp$")


@contextlib.contextmanager
def naming_faults(target: Path) -> Iterator[None]:
    """A fault of the machine while writing `target` (a full disk, a read-only file system) is reported
    against `target`, not a temporary name or no name at all (`simroute_output` on the OSError)."""
    try:
        yield
    except OSError as exc:
        temporary = any(_TEMP_NAME.search(part) for part in target.parts)     # a write inside a temporary
        if getattr(exc, "simroute_output", None) is None and not temporary:
            with contextlib.suppress(AttributeError):
                exc.simroute_output = str(target)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _temp_prefix(target: Path) -> str:
    """Temporary names carry the writer's pid, so a later writer can tell debris of a killed one."""
    return f".{target.name}.simroute-{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:          # EPERM: alive, someone else's
        return True
    return True


def clean_stale_temps(target: Path) -> list[Path]:
    """Remove what killed writers of `target` left beside it (`.NAME.simroute-PID-*.tmp`, `.NAME.old-PID`),
    where that PID no longer runs. Called under the target's lock, at the next write."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(?:simroute-(\d+)-[^./]*\.tmp|old-(\d+))$")
    # before temporaries carried a pid (mkstemp's 8 random characters): under the lock no writer of this target
    # is alive, so one of these left beside it is a killed writer's
    legacy = re.compile(rf"^\.{re.escape(target.name)}\.[a-z0-9_]{{8}}\.tmp$")
    removed = []
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return removed
    for path in siblings:
        match = pattern.match(path.name)
        if match and not _pid_alive(int(match.group(1) or match.group(2))) or legacy.match(path.name):
            _remove(path)
            removed.append(path)
    return removed


def _temp_beside(target: Path, directory: bool) -> Path:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if directory:
            return Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent))
        fd, name = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent)
        os.close(fd)
        return Path(name)
    except OSError as exc:
        raise ConfigurationError(f"cannot create the output: {exc.strerror}", file=target) from None


@contextlib.contextmanager
def undo_folders(directory: Path) -> Iterator[None]:
    """On failure inside, remove the folders up to `directory` that did not exist on entry (and are empty
    again): a failed write leaves no trace of the path it would have made."""
    created = missing_folders(directory)
    try:
        yield
    except BaseException:
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def missing_folders(directory: Path) -> list[Path]:
    """`directory` and those of its ancestors that do not exist yet, innermost first."""
    out = []
    while not directory.exists() and directory != directory.parent:
        out.append(directory)
        directory = directory.parent
    return out
