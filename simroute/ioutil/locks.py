"""The exclusive lock of an output (`.NAME.lock` beside it), held from the check to the rename: a second
writer of the same path fails at once. Reentrant within a process."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError
from simroute.ioutil.paths import check_output_path, check_replaceable
from simroute.ioutil.temps import clean_stale_temps, naming_faults, undo_folders


_CLAIMS: dict[str, list[Any]] = {}          # resolved target -> [fd, depth]; this process's held locks

_CLAIMS_GUARD = threading.Lock()


def _lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


def _acquire(target: Path) -> int:
    lock = _lock_path(target)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise ConfigurationError("another simroute process is writing this output right now; wait for it "
                                         "or choose another path", file=target) from None
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)             # the previous holder removed it between our open and lock: try again


def _release(target: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(_lock_path(target))
    os.close(fd)


@contextlib.contextmanager
def lock_output(target: str | Path, *, flag: str | None = None) -> Iterator[Path]:
    """Hold the exclusive lock of `target` (fails fast if another process holds it). Reentrant in a process."""
    target = Path(target)
    key = str(target.resolve())
    with _CLAIMS_GUARD:
        held = _CLAIMS.get(key)
        if held is not None:
            held[1] += 1
        else:
            try:
                _CLAIMS[key] = [_acquire(target), 1]
            except OSError as exc:
                raise ConfigurationError(f"cannot lock the output: {exc.strerror}", file=target, field=flag) from None
    try:
        yield target
    finally:
        with _CLAIMS_GUARD:
            held = _CLAIMS[key]
            held[1] -= 1
            if held[1] == 0:
                del _CLAIMS[key]
                _release(target, held[0])


@contextlib.contextmanager
def claim_output(target: str | Path, *, directory: bool = True, inputs: Iterable[str | Path | None] = (),
                 flag: str | None = None, what: str = "output") -> Iterator[Path]:
    """Validate `target`, lock it and (for a directory) check it may be replaced, before any work.

    Wrap the whole command in it so a concurrent writer fails before simulating, not after; writes inside
    (`atomic_path`) reuse the claim.
    """
    target = check_output_path(target, directory=directory, inputs=inputs, flag=flag)
    with naming_faults(target), undo_folders(target.parent), lock_output(target, flag=flag):
        clean_stale_temps(target)
        if directory:
            check_replaceable(target, what=what)
        yield target
