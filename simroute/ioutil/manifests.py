"""The manifest of a folder simroute wrote (`MANIFEST`): which files are simroute's, unchanged, and so may be
replaced; everything else in the folder is the user's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError
from simroute.ioutil.temps import _remove, _temp_beside


MANIFEST = ".simroute-manifest.json"


def _manifest(directory: Path) -> dict[str, list[int]]:
    """{relative path: [size, mtime_ns]} of every file under `directory` except the manifest itself."""
    out: dict[str, list[int]] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST:
            st = path.stat()
            out[path.relative_to(directory).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def _write_manifest(directory: Path, kind: str | None = None) -> None:
    doc: dict[str, Any] = {"written_by": "simroute", "files": _manifest(directory)}
    if kind is not None:
        doc["kind"] = kind
    (directory / MANIFEST).write_text(json.dumps(doc, sort_keys=True) + "\n")


def manifest_kind(directory: Path) -> str | None:
    """The kind a simroute directory's manifest declares (`report`, `study`), None where it declares none."""
    try:
        doc = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc.get("kind") if isinstance(doc, dict) and isinstance(doc.get("kind"), str) else None


def _nested_outputs(directory: Path, listed: dict[str, Any]) -> dict[Path, list[str]]:
    """Subdirectories simroute wrote whole after the parent (a report inside a run), each with what in it
    simroute did not write: they carry their own manifest, so they answer for their own files."""
    out = {}
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink()):
        if (sub / MANIFEST).is_file() and not any(k.startswith(sub.name + "/") for k in listed):
            out[sub] = [f"{sub.name}/{name}" for name in foreign_files(sub)]
    return out


def foreign_files(directory: Path) -> list[str]:
    """What in `directory` simroute did not write there (or was changed since): empty means replaceable.

    A subdirectory with a manifest of its own (a report written into a run) answers for its own files: if
    all of them are simroute's, so is the subdirectory, and a later run may replace the whole directory."""
    entries = [p for p in directory.rglob("*") if p.name != MANIFEST or p.parent != directory]
    if not entries:
        return []
    try:
        listed = json.loads((directory / MANIFEST).read_text())["files"]
        if not isinstance(listed, dict):
            raise TypeError
    except (OSError, ValueError, TypeError, KeyError):
        return sorted(p.relative_to(directory).as_posix() for p in entries if not p.is_dir())[:3] or ["(folders)"]
    nested = _nested_outputs(directory, listed)
    inside = lambda p: any(sub == p or sub in p.parents for sub in nested)
    entries = [p for p in entries if not inside(p)]
    actual = {name: stat for name, stat in _manifest(directory).items() if not inside(directory / name)}
    foreign = [name for name, stat in actual.items() if listed.get(name) != stat]
    extra = [p.relative_to(directory).as_posix() for p in entries
             if (p.is_symlink() or not (p.is_file() or p.is_dir()))]
    return sorted(foreign + extra + [name for names in nested.values() for name in names])


def _listed_unchanged(path: Path) -> bool:
    """Whether `path` is a file its folder's manifest lists, unchanged since simroute wrote it."""
    try:
        listed = json.loads((path.parent / MANIFEST).read_text())["files"]
        st = path.lstat()
    except (OSError, ValueError, TypeError, KeyError):
        return False
    return isinstance(listed, dict) and path.is_file() and not path.is_symlink() \
        and listed.get(path.name) == [st.st_size, st.st_mtime_ns]


def record_files(directory: Path, names: Iterable[str]) -> None:
    """Add `names` (files just written) to `directory`'s manifest, keeping what it already listed."""
    doc: dict[str, Any] = {"written_by": "simroute", "files": {}}
    with contextlib.suppress(OSError, ValueError):
        old = json.loads((directory / MANIFEST).read_text())
        if isinstance(old, dict) and isinstance(old.get("files"), dict):
            doc = old
    for name in names:
        st = (directory / name).stat()
        doc["files"][name] = [st.st_size, st.st_mtime_ns]
    tmp = _temp_beside(directory / MANIFEST, False)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)         # mkstemp's 0600: the permissions a plain open() would give
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
        os.replace(tmp, directory / MANIFEST)
    except BaseException:
        _remove(tmp)
        raise


def sha256_file(path: str | Path) -> str:
    """Content hash of a file (or of every file under a directory, in sorted order; the manifest excluded)."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST) if path.is_dir() else [path]
    try:
        for p in files:
            if path.is_dir():
                h.update(str(p.relative_to(path)).encode())
            with p.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    except OSError as exc:
        raise ConfigurationError(f"cannot read: {exc.strerror}", file=path) from None
    return h.hexdigest()
