"""Atomic writes: a file or a folder written to a temporary beside its target and renamed into place only
when the whole block succeeds (a folder swapped in one `renameat2(RENAME_EXCHANGE)`); JSON every parser reads."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError
from simroute.ioutil import manifests
from simroute.ioutil.locks import claim_output, lock_output
from simroute.ioutil.manifests import record_files
from simroute.ioutil.paths import check_new_file, check_output_path, check_replaceable
from simroute.ioutil.temps import _remove, _temp_beside, naming_faults, undo_folders


_RENAME_EXCHANGE = 2

_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace_directory(tmp: Path, target: Path, what: str) -> None:
    if not target.exists():
        os.replace(tmp, target)
        return
    check_replaceable(target, what=what)          # again, under the lock, right before the swap
    if _exchange(tmp, target):
        _remove(tmp)                                # tmp now holds the previous contents
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.replace(target, old)
    os.replace(tmp, target)
    _remove(old)


@contextlib.contextmanager
def atomic_path(target: str | Path, *, directory: bool = False, what: str = "output",
                kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `target`; move it onto `target` only if the block succeeds.

    Works for files and for directories (a Parquet dataset, a run's output folder); a directory gets a
    manifest of the files written into it, which is what lets a later write replace it.
    """
    target = Path(target)
    with claim_output(target, directory=directory, what=what):
        tmp = _temp_beside(target, directory)
        # mkstemp / mkdtemp create 0600 / 0700: give the result the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, (0o777 if directory else 0o666) & ~umask)
        try:
            yield tmp
            if directory:
                manifests._write_manifest(tmp, kind if kind is not None else (what if what != "output" else None))
                _replace_directory(tmp, target, what)
            else:
                if target.is_dir():
                    raise ConfigurationError("is a directory; give a file path", file=target)
                os.replace(tmp, target)
        except BaseException:
            _remove(tmp)
            raise


@contextlib.contextmanager
def atomic_files(directory: str | Path, names: Iterable[str], *, flag: str | None = None,
                 inputs: Iterable[str | Path | None] = ()) -> Iterator[dict[str, Path]]:
    """Write several files into `directory` as one output: each must be new or simroute's own (checked
    before any work), all are written to temporaries, and renamed only when the whole block succeeds.

    The folder may hold other files (a user's `figs/`, the working directory of `topo show --png`); its
    manifest then lists the files simroute put there, which is what lets the next write replace them and
    nothing else. A failed write leaves the folder as it was (a folder it had to create is removed again).
    `inputs` are files the command reads: none of the outputs may be one."""
    names = list(names)
    inputs = list(inputs)
    directory = check_output_path(directory, directory=True, flag=flag)
    with naming_faults(directory / names[0] if len(names) == 1 else directory), undo_folders(directory), \
            lock_output(directory, flag=flag):
        for name in names:
            check_new_file(directory / name, flag=flag, inputs=inputs)
        temps: dict[str, Path] = {}
        umask = os.umask(0)
        os.umask(umask)
        try:
            for name in names:
                temps[name] = _temp_beside(directory / name, False)
                os.chmod(temps[name], 0o666 & ~umask)
            yield temps
            for name in names:
                os.replace(temps[name], directory / name)
            record_files(directory, names)
        except BaseException:
            for tmp in temps.values():
                _remove(tmp)
            raise


def write_text_atomic(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def dumps_json(obj: Any, **kwargs: Any) -> str:
    """JSON that every parser reads: NaN and +-inf become null (json.dumps would write bare `NaN`)."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):     # numpy scalars
        with contextlib.suppress(TypeError, ValueError):
            return _finite(obj.item())
    return obj
