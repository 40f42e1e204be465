"""Atomic outputs and validated loading: bad input never leaves half-written files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from simroute.errors import ConfigurationError


@contextlib.contextmanager
def atomic_path(target: str | Path, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it onto `target` only if the block succeeds.

    Works for files and for directories (e.g. a Parquet dataset or a run's output folder).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    # mkstemp / mkdtemp create 0600 / 0700: give the result the permissions a plain open() would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, (0o777 if directory else 0o666) & ~umask)
    try:
        yield tmp
        if target.is_dir() and not directory:
            raise ConfigurationError("is a directory; give a file path", file=target)
        if directory and target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def check_replaceable(target: str | Path, markers: tuple[str, ...], what: str) -> None:
    """Refuse to replace an existing directory that holds something other than a previous `what`.

    Output directories are replaced whole (atomically); this keeps `-o ~/thesis` from deleting a thesis.
    """
    target = Path(target)
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigurationError(f"exists and is not a directory; choose another path for the {what}", file=target)
    if any(target.iterdir()) and not any((target / m).exists() for m in markers):
        raise ConfigurationError(f"exists, is not empty and does not hold a previous {what}: refusing to replace "
                                 f"it (choose a new or empty directory)", file=target)


def write_text_atomic(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def load_yaml(path: str | Path) -> Any:
    """Load a YAML file, turning I/O and syntax errors into a ConfigurationError naming the file."""
    path = Path(path)
    if not path.exists():
        raise ConfigurationError("file not found", file=path)
    try:
        with path.open() as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise ConfigurationError(f"not valid YAML: {getattr(exc, 'problem', exc)}", file=path,
                                 line=None if line is None else line + 1) from None


def sha256_file(path: str | Path, *, limit: int | None = None) -> str:
    """Content hash of a file (or of every file under a directory, in sorted order)."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in files:
        if path.is_dir():
            h.update(str(p.relative_to(path)).encode())
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
