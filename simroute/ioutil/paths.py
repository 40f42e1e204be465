"""Output paths checked before any work: the right kind, creatable, not an input, and replaceable (only
simroute's own files, by the manifest)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from simroute.errors import ConfigurationError
from simroute.ioutil.manifests import _listed_unchanged, foreign_files, manifest_kind


def check_output_path(target: str | Path, *, directory: bool, inputs: Iterable[str | Path | None] = (),
                      flag: str | None = None) -> Path:
    """Refuse an output path that cannot work, before any work: wrong kind, uncreatable, or overlapping an input.

    `inputs` are paths the command reads; writing inside one, onto one, or replacing a directory that holds
    one would destroy what is being read.
    """
    target = Path(target)
    if target.exists() or target.is_symlink():
        if directory and not target.is_dir():
            raise ConfigurationError("exists and is not a directory; give a directory path", file=target,
                                     field=flag)
        if not directory and target.is_dir():
            raise ConfigurationError("is a directory; give a file path", file=target, field=flag)
    ancestor = target.parent
    while not ancestor.exists():
        if ancestor.is_symlink():
            raise ConfigurationError(f"{ancestor} is a dangling link; cannot create the output", file=target,
                                     field=flag)
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigurationError(f"cannot create: {ancestor} is a file, not a directory", file=target, field=flag)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigurationError(f"cannot create: {ancestor} is not writable", file=target, field=flag)
    resolved = target.resolve()
    for item in inputs:
        if item is None:
            continue
        source = Path(item).resolve()
        if resolved == source or source in resolved.parents:
            raise ConfigurationError(f"is or lies inside {item}, which this command also uses; choose another "
                                     f"output path", file=target, field=flag)
        if directory and resolved in source.parents:
            raise ConfigurationError(f"holds {item}, which this command also uses; replacing the directory would "
                                     f"delete it", file=target, field=flag)
    return target


def check_replaceable(target: str | Path, markers: tuple[str, ...] = (), what: str = "output") -> None:
    """Refuse to replace an existing directory unless everything in it is a file simroute wrote there.

    `markers` is kept for callers written before the manifest; the manifest alone decides.
    """
    del markers
    target = Path(target)
    if not target.exists():
        check_output_path(target, directory=True)
        return
    if not target.is_dir():
        raise ConfigurationError(f"exists and is not a directory; choose another path for the {what}", file=target)
    foreign = foreign_files(target)
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise ConfigurationError(f"holds files simroute did not write there ({shown}): refusing to replace it "
                                 f"with the {what} (choose a new or empty directory)", file=target)
    kind = manifest_kind(target)
    if kind is not None and what != "output" and kind != what:
        raise ConfigurationError(f"holds simroute's {kind}, not a {what}: a {what} never replaces it (choose a new "
                                 "or empty directory)", file=target)


def check_new_file(target: str | Path, *, flag: str | None = None,
                   inputs: Iterable[str | Path | None] = ()) -> Path:
    """A single output file: new, or one simroute wrote into a folder of its own (listed unchanged in the
    folder's manifest). Anything else is the user's and is never overwritten."""
    target = check_output_path(target, directory=False, inputs=inputs, flag=flag)
    if (target.exists() or target.is_symlink()) and not _listed_unchanged(target):
        raise ConfigurationError("exists and simroute did not write it (or it was changed since): refusing to "
                                 "overwrite it; choose a new path", file=target, field=flag)
    return target
